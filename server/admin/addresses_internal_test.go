package admin

import (
	"slices"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// TestMachineToProtoAddresses: the guest's addresses from its latest
// Configure reach the admin machine, and never BigFleet's Machine.
func TestMachineToProtoAddresses(t *testing.T) {
	t.Parallel()
	m := record.Machine{ID: "m1", State: record.Configured, History: []record.Transition{
		{Kind: record.OpCreate, Outcome: "succeeded", Note: "host h1: most free"},
		{Kind: record.OpConfigure, Outcome: "succeeded", Note: "addresses: eth0 192.0.2.10/24, eth0 2001:db8::10/64"},
	}}
	got := machineToProto(m, time.Now())
	if want := []string{"eth0 192.0.2.10/24", "eth0 2001:db8::10/64"}; !slices.Equal(got.GetAddresses(), want) {
		t.Fatalf("addresses %q, want %q", got.GetAddresses(), want)
	}
	m.History = m.History[:1]
	if got := machineToProto(m, time.Now()); len(got.GetAddresses()) != 0 {
		t.Fatalf("idle machine addresses %q, want none", got.GetAddresses())
	}
}
