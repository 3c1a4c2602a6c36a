package libvirt

import (
	"context"
	"errors"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

// TestLinkFaultsAreTransient: a call that failed because of the link (an
// RPC error or timeout, or a connection that dropped under it) is
// backend.ErrTransient, so the engine retries the idempotent transition
// within its deadline instead of failing the machine; an error the daemon
// answered on a live connection is not.
func TestLinkFaultsAreTransient(t *testing.T) {
	t.Parallel()
	for kind, want := range map[faultKind]bool{faultRPC: true, faultTimeout: true, faultDrop: true, faultAfter: true, faultInternal: false} {
		t.Run(kindName(kind), func(t *testing.T) {
			t.Parallel()
			b, f, _ := newFaultBackend(t, nil, nil)
			pl := mustCreate(t, b, "m1")
			f.add(stepFault{op: "dom.Destroy", name: "$dom"}.rule(kind, pl.Domain))
			err := b.Delete(context.Background(), backend.DeleteSpec{MachineID: "m1", Zone: "z1", Placement: pl})
			if err == nil {
				t.Fatal("the fault did not fail Delete")
			}
			if got := errors.Is(err, backend.ErrTransient); got != want {
				t.Fatalf("transient = %v, want %v (err %v)", got, want, err)
			}
		})
	}
}
