package fake

import (
	"context"
	"errors"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

// TestDeleteCutLeavesIntent: a Delete cut by OpDeleteCut leaves the VM
// with its intent, listed; a Create then finishes that Delete and builds
// anew instead of adopting the VM; an uncut Delete removes the VM.
func TestDeleteCutLeavesIntent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, hosts := range [][]Host{nil, {{Name: "h1", Zone: "zone-a", VCPUs: 8, MemoryMiB: 8192, PoolGiB: 100}}} {
		b := New(Options{Hosts: hosts})
		spec := backend.MachineSpec{MachineID: "m1", OperationID: "op-c", Zone: "zone-a", VCPU: 1, MemoryMiB: 64}
		pl, err := b.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		b.SetFailure(OpDeleteCut, "m1", errors.New("killed"))
		if err := b.Delete(ctx, backend.DeleteSpec{MachineID: "m1", OperationID: "op-d", Placement: pl}); err == nil {
			t.Fatal("cut Delete succeeded")
		}
		b.SetFailure(OpDeleteCut, "m1", nil)
		inv := b.Inventory(ctx)
		if len(inv[0].Machines) != 1 || inv[0].Machines[0].DeleteOperationID != "op-d" {
			t.Fatalf("listed after the cut: %+v", inv[0].Machines)
		}
		spec.OperationID = "op-c2"
		if _, err := b.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
		if vm, _ := b.VM("m1"); vm.DeleteOperationID != "" || vm.OperationID != "op-c2" {
			t.Fatalf("Create adopted the VM of a begun Delete: %+v", vm)
		}
		if err := b.Delete(ctx, backend.DeleteSpec{MachineID: "m1", OperationID: "op-d2", Placement: pl}); err != nil {
			t.Fatal(err)
		}
		if b.Len() != 0 {
			t.Fatal("Delete left the VM")
		}
	}
}
