package server

import (
	"context"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

// A network host whose socket has no TCP timeouts shows as
// host_link_timeouts 0, one that has them as 1, a local host not at all;
// the calls a host holds inside libvirt are gauges too.
func TestHostLinkMetrics(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	hosts := []backend.HostStatus{
		{Name: "kvm-1", Zone: "z", Connected: true, LinkTimeouts: "missing", CallsInside: 70, CallsAbandoned: 64},
		{Name: "kvm-2", Zone: "z", Connected: true, LinkTimeouts: "set"},
		{Name: "local", Zone: "z", Connected: true},
	}
	c := m.RegisterHostCapacity(func(context.Context) []backend.HostStatus { return hosts })
	t.Cleanup(c.Close)
	c.Refresh()
	waitRead(t, c)
	at := func(h string) map[string]string { return map[string]string{"zone": "z", "host": h} }
	for _, x := range []struct {
		name, host string
		want       float64
	}{
		{"host_link_timeouts", "kvm-1", 0}, {"host_link_timeouts", "kvm-2", 1},
		{"host_libvirt_calls_inside", "kvm-1", 70}, {"host_libvirt_calls_abandoned", "kvm-1", 64},
	} {
		if got, ok := seriesValue(t, m, x.name, at(x.host)); !ok || got != x.want {
			t.Errorf("%s{%s} = %v (found %v), want %v", x.name, x.host, got, ok, x.want)
		}
	}
	if _, ok := seriesValue(t, m, "host_link_timeouts", at("local")); ok {
		t.Error("host_link_timeouts shown for a local host")
	}
}
