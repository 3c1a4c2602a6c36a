package libvirt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// A reconcile listing that read the hosts' domains before a migration
// ended and hands them to placement after it (here: held at the size
// reading that ends each host's listing) must not undo the move's books:
// the machine stays booked on its destination only, and the room it left
// on its source is free for the next Create. Before the fix the late
// listing booked it back on the source and off the destination until the
// next pass.
func TestMigrateLateListingKeepsTheBooks(t *testing.T) {
	t.Parallel()
	b, f, pl := emulatedMigration(t)
	ctx := context.Background()
	to := map[string]string{"a": "b", "b": "a"}[pl.Host]

	hold := f.add(&fault{op: "conn.GetNodeInfo", kind: faultBlock})
	listed := make(chan []backend.ZoneInventory, 1)
	go func() { listed <- b.Inventory(ctx) }()
	for deadline := time.Now().Add(5 * time.Second); f.hits(hold) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the listing did not reach both hosts' size readings (%d)", f.hits(hold))
		}
	}
	if _, err := b.Migrate(ctx, backend.MigrateSpec{MachineID: "m1", Placement: pl, VCPU: 1, MemoryMiB: 512, ToHost: to}); err != nil {
		t.Fatal(err)
	}
	close(hold.release)
	inv := <-listed
	f.clear()
	if len(inv) != 1 || len(inv[0].Machines) != 1 || inv[0].Machines[0].Placement.Host != pl.Host {
		t.Fatalf("the late listing %+v: want m1 seen on its source %s", inv, pl.Host)
	}
	used := map[string]int{}
	for _, h := range b.Hosts(ctx) {
		used[h.Name] = h.Capacity.Machines
	}
	if used[pl.Host] != 0 || used[to] != 1 {
		t.Fatalf("books after a listing that began before the move ended: %v, want %s 0 and %s 1", used, pl.Host, to)
	}
	if h, _ := b.loc.plan.HostOf("z1", "m1"); h != to {
		t.Fatalf("m1 is booked on %q, want %s", h, to)
	}
}

// A Create placed while a migration is in flight, in a zone whose only
// room for it is what the move gives back on its source, is refused with
// the cause and as transient (the engine tries it again), not for good;
// once the move ended it is placed on the source.
func TestPlaceDuringMigrationWaitsForItsRoom(t *testing.T) {
	t.Parallel()
	b, f, pl := emulatedMigration(t)
	ctx := context.Background()
	to := map[string]string{"a": "b", "b": "a"}[pl.Host]
	hold := f.add(&fault{op: "conn.Migrate3", kind: faultBlock})
	moved := make(chan error, 1)
	go func() {
		_, err := b.Migrate(ctx, backend.MigrateSpec{MachineID: "m1", Placement: pl, VCPU: 1, MemoryMiB: 512, ToHost: to})
		moved <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); f.hits(hold) < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the migration did not reach its libvirt call")
		}
	}
	// 4 vCPU: each host has 3 free while m1 is booked on both.
	_, err := b.Place(sized("m2", 4, 512))
	if !errors.Is(err, backend.ErrNoCapacity) || !backend.IsTransient(err) || !strings.Contains(err.Error(), "migration in flight off host "+pl.Host) {
		t.Fatalf("Place during the move: %v, want a transient ErrNoCapacity naming host %s", err, pl.Host)
	}
	close(hold.release)
	if err := <-moved; err != nil {
		t.Fatal(err)
	}
	got, err := b.Place(sized("m2", 4, 512))
	if err != nil || got.Host != pl.Host {
		t.Fatalf("Place after the move: %+v, %v; want host %s", got, err, pl.Host)
	}
}
