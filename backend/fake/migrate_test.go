package fake

import (
	"context"
	"errors"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

// twoHostsWithMachine is twoHosts (spread) with machine m1 (2 vCPU,
// 2 GiB) created in zone-a.
func twoHostsWithMachine(t *testing.T) (*Backend, backend.Placement) {
	t.Helper()
	b := twoHosts(placement.Spread)
	p, err := b.Create(context.Background(), hspec("m1", "zone-a", 2, 2048))
	if err != nil {
		t.Fatal(err)
	}
	return b, p
}

func TestMigrateMovesAndBooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, p := twoHostsWithMachine(t)
	np, err := b.Migrate(ctx, backend.MigrateSpec{MachineID: "m1", Placement: p})
	if err != nil || np.Host == p.Host || np.Host == "" || np.Domain != p.Domain || np.Why == "" {
		t.Fatalf("migrate %+v -> %+v, %v", p, np, err)
	}
	if vm, _ := b.VM("m1"); vm.Placement.Host != np.Host || !vm.Running {
		t.Fatalf("vm after migrate %+v", vm)
	}
	used := map[string]int{}
	for _, h := range b.Hosts(ctx) {
		used[h.Name] = h.Capacity.UsedVCPUs
	}
	if used[p.Host] != 0 || used[np.Host] != 2 {
		t.Fatalf("books after the move: %v", used)
	}
	// Back by name.
	if back, err := b.Migrate(ctx, backend.MigrateSpec{MachineID: "m1", Placement: np, ToHost: p.Host}); err != nil || back.Host != p.Host {
		t.Fatalf("migrate back: %+v, %v", back, err)
	}
}

func TestMigrateFailureKeepsVMAndReleasesBooking(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, p := twoHostsWithMachine(t)
	p.Why = ""
	boom := errors.New("migration job failed")
	b.SetFailure(OpMigrate, "m1", boom)
	if _, err := b.Migrate(ctx, backend.MigrateSpec{MachineID: "m1", Placement: p}); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if vm, _ := b.VM("m1"); vm.Placement != p || !vm.Running {
		t.Fatalf("vm moved on failure: %+v", vm)
	}
	for _, h := range b.Hosts(ctx) {
		if h.Zone == "zone-a" && h.Name != p.Host && h.Capacity.Machines != 0 {
			t.Fatalf("destination %s still booked: %+v", h.Name, h.Capacity)
		}
	}
	// A single-host zone, another zone's host, or a stopped VM: refused.
	if _, err := b.Migrate(ctx, backend.MigrateSpec{MachineID: "m1", Placement: p, ToHost: "b1"}); !errors.Is(err, backend.ErrUnknownHost) {
		t.Fatalf("other zone's host: %v", err)
	}
	if _, err := New(Options{}).Migrate(ctx, backend.MigrateSpec{MachineID: "x", Placement: backend.Placement{Zone: "zone-a"}}); !errors.Is(err, backend.ErrNoCapacity) {
		t.Fatalf("single host: %v", err)
	}
}
