package server

import (
	"context"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

// TestHostCapacityMetrics: every host gets its own series, labelled by
// zone and host (a --connect host named after its zone), with the
// placeable size after overcommit, the cordon and the down declaration.
func TestHostCapacityMetrics(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	hosts := []backend.HostStatus{
		{Name: "kvm-a1", Zone: "zone-a", Connected: true, Cordoned: true, Capacity: backend.HostCapacity{
			VCPUs: 10, MemoryMiB: 1024, FreeMemoryMiB: 512, PoolFreeBytes: 7 << 30,
			CPUOvercommit: 1.55, MemoryOvercommit: 2, UsedVCPUs: 4, UsedMemoryMiB: 256, Machines: 2}},
		{Name: "kvm-a2", Zone: "zone-a", Down: true, DownReason: "powered off"},
		{Zone: "zone-b", Connected: true, Capacity: backend.HostCapacity{VCPUs: 8}},
	}
	c := m.RegisterHostCapacity(func(ctx context.Context) []backend.HostStatus {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("hosts read without a bound")
		}
		return hosts
	})
	t.Cleanup(c.Close)
	c.Refresh()
	waitRead(t, c)
	a1 := map[string]string{"zone": "zone-a", "host": "kvm-a1"}
	for name, want := range map[string]float64{
		"host_connected": 1, "host_cordoned": 1, "host_vcpus": 10, "host_vcpus_placeable": 15, "host_vcpus_used": 4,
		"host_memory_bytes": 1 << 30, "host_memory_placeable_bytes": 2 << 30, "host_memory_used_bytes": 256 << 20,
		"host_memory_free_bytes": 512 << 20, "host_pool_free_bytes": 7 << 30, "host_machines": 2,
	} {
		if got, ok := seriesValue(t, m, name, a1); !ok || got != want {
			t.Errorf("%s{kvm-a1} = %v (found %v), want %v", name, got, ok, want)
		}
	}
	if got, ok := seriesValue(t, m, "host_connected", map[string]string{"zone": "zone-a", "host": "kvm-a2"}); !ok || got != 0 {
		t.Errorf("host_connected{kvm-a2} = %v (found %v), want 0", got, ok)
	}
	for host, want := range map[string]float64{"kvm-a1": 0, "kvm-a2": 1} {
		if got, ok := seriesValue(t, m, "host_down", map[string]string{"zone": "zone-a", "host": host}); !ok || got != want {
			t.Errorf("host_down{%s} = %v (found %v), want %v", host, got, ok, want)
		}
	}
	if got, ok := seriesValue(t, m, "host_vcpus", map[string]string{"zone": "zone-b", "host": "zone-b"}); !ok || got != 8 {
		t.Errorf("host_vcpus{zone-b} = %v (found %v), want 8", got, ok)
	}
	if got, _ := seriesValue(t, m, "host_vcpus_placeable", map[string]string{"zone": "zone-b", "host": "zone-b"}); got != 0 {
		t.Errorf("not enforced: placeable = %v, want 0", got)
	}
}
