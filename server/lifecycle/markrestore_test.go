package lifecycle

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

type fm = backend.FenceMark

// TestRestoreMarksMaxWins: restoreMarks raises missing and lower marks to
// the recorded ones, never lowers a higher one, ignores unknown machines
// and zones whose listing failed, and makes what it raised durable.
func TestRestoreMarksMaxWins(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	ctx := t.Context()
	for _, r := range []record.CreateRequest{
		{MachineID: "m000", Token: tok("hi", 9, 9)},
		{MachineID: "m000", Token: tok("lo", 2, 0)},
	} {
		if _, err := f.e.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	inv := []backend.ZoneInventory{
		{Zone: "zone-a", Machines: []backend.Observed{
			{MachineID: "m000", Marks: map[string]fm{
				"hi":  {Epoch: 9, Sequence: 8},   // lower than known: kept at 9/9
				"lo":  {Epoch: 2, Sequence: 1},   // higher: raised
				"new": {Epoch: 0, Sequence: 0}}}, // unknown to the engine: restored
			{MachineID: "stranger", Marks: map[string]fm{"s": {Epoch: 1}}},
		}},
		{Zone: "zone-b", Err: errors.New("host down"), Machines: []backend.Observed{
			{MachineID: "m001", Marks: map[string]fm{"s": {Epoch: 1}}}}},
	}
	if n := restoreAll(f.e, ctx, inv); n != 2 {
		t.Fatalf("raised %d marks, want 2", n)
	}
	want := map[record.MarkKey]record.Mark{
		{ShardID: "hi", MachineID: "m000"}:  {Epoch: 9, Sequence: 9},
		{ShardID: "lo", MachineID: "m000"}:  {Epoch: 2, Sequence: 1},
		{ShardID: "new", MachineID: "m000"}: {},
	}
	if got := f.e.Marks(); !maps.Equal(got, want) {
		t.Fatalf("marks after restore:\n got %v\nwant %v", got, want)
	}
	f.st.mu.Lock()
	durable := maps.Clone(f.st.marks)
	f.st.mu.Unlock()
	if !maps.Equal(durable, want) {
		t.Fatalf("durable marks after restore:\n got %v\nwant %v", durable, want)
	}
	if n := restoreAll(f.e, ctx, inv); n != 0 {
		t.Fatalf("second pass raised %d marks, want 0", n)
	}
	if _, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: "c", Token: tok("lo", 2, 1)}); codeOf(err) != record.CodeFenced {
		t.Fatalf("token equal to the restored mark: %v, want FailedPrecondition", err)
	}
}

// TestRestoreMarksStoreDown: a mark the store could not take does not
// count (the fence must not rely on a mark a restart would forget); the
// next pass raises it.
func TestRestoreMarksStoreDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	inv := []backend.ZoneInventory{{Zone: "zone-a", Machines: []backend.Observed{
		{MachineID: "m000", Marks: map[string]fm{"s": {Epoch: 5}}}}}}
	f.st.setFail(errors.New("disk full"))
	if n := restoreAll(f.e, t.Context(), inv); n != 0 || len(f.e.Marks()) != 0 {
		t.Fatalf("with the store down: raised %d, marks %v", n, f.e.Marks())
	}
	f.st.setFail(nil)
	if n := restoreAll(f.e, t.Context(), inv); n != 1 {
		t.Fatalf("after the store recovered: raised %d, want 1", n)
	}
}

func TestMachineMarks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	for _, r := range []record.CreateRequest{
		{MachineID: "m000", Token: tok("a", 1, 2)},
		{MachineID: "m000", Token: tok("b", 3, 4)},
		{MachineID: "m001", Token: tok("a", 7, 7)},
	} {
		if _, err := f.e.Create(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := f.e.machineMarks("m000"), map[string]fm{"a": {Epoch: 1, Sequence: 2}, "b": {Epoch: 3, Sequence: 4}}; !maps.Equal(got, want) {
		t.Fatalf("machineMarks(m000) = %v, want %v", got, want)
	}
	if got := f.e.machineMarks("m002"); got != nil {
		t.Fatalf("machineMarks of a machine without marks = %v, want nil", got)
	}
}

// restoreAll runs restoreMarks on every zone of inv, as a pass does.
func restoreAll(e *Engine, ctx context.Context, inv []backend.ZoneInventory) int {
	n := 0
	for _, zi := range inv {
		n += e.fences.Restore(ctx, zi)
	}
	return n
}
