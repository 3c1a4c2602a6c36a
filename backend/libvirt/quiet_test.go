package libvirt

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

// A quiet leader (backend.ChangeGater, issue 41): while the gate says no,
// a Delete changes nothing on the host and fails as a transient fault
// naming the cause (the engine runs it again later); reads still answer;
// once the gate says yes, the same Delete goes through.
func TestGateChangesHoldsBackHostChanges(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	late := errors.New("renewal late")
	var quiet atomic.Bool
	quiet.Store(true)
	b.GateChanges(func() error {
		if quiet.Load() {
			return late
		}
		return nil
	})

	ctx := context.Background()
	del := backend.DeleteSpec{MachineID: "m1", OperationID: "op-del", Zone: "z1", Placement: pl}
	err := b.Delete(ctx, del)
	if !errors.Is(err, late) || !backend.IsTransient(err) {
		t.Fatalf("Delete while held back: %v; want a transient fault carrying the cause", err)
	}
	if !domainExists(t, c, pl.Domain) {
		t.Fatal("the domain went while changes were held back")
	}
	if md := readMD(t, c, pl.Domain); md.Delete.Begun() {
		t.Fatalf("the Delete's intent was written while changes were held back: %+v", md.Delete)
	}
	listedMachine(t, b, "m1") // reads go on

	quiet.Store(false)
	if err := b.Delete(ctx, del); err != nil {
		t.Fatalf("Delete once allowed: %v", err)
	}
	if domainExists(t, c, pl.Domain) {
		t.Fatal("the domain is still there after the Delete")
	}
}
