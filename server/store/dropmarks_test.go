package store

import (
	"path/filepath"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle"
)

// TestDropMarks: a batch's DropMarks delete those fence marks durably
// (an operator's fence clear, issue 39), in both stores, leaving the
// others.
func TestDropMarks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a := lifecycle.MarkKey{ShardID: "a", MachineID: "m0"}
	b := lifecycle.MarkKey{ShardID: "b", MachineID: "m0"}
	path := filepath.Join(t.TempDir(), "state.db")
	bolt := openBolt(t, path, BoltOptions{})
	for _, st := range []lifecycle.Store{bolt, NewMemory()} {
		must(t, st.Commit(ctx, lifecycle.Batch{Marks: map[lifecycle.MarkKey]lifecycle.Mark{a: {Epoch: 1, Sequence: 2}, b: {Epoch: 3}}}))
		must(t, st.Commit(ctx, lifecycle.Batch{DropMarks: []lifecycle.MarkKey{a}}))
		snap, err := st.Load(ctx)
		must(t, err)
		if len(snap.Marks) != 1 || snap.Marks[b] != (lifecycle.Mark{Epoch: 3}) {
			t.Errorf("%T: marks after the drop = %v; want b's only", st, snap.Marks)
		}
	}
	must(t, bolt.Close())
	reopened := openBolt(t, path, BoltOptions{})
	defer reopened.Close()
	snap, err := reopened.Load(ctx)
	must(t, err)
	if _, ok := snap.Marks[a]; ok || len(snap.Marks) != 1 {
		t.Errorf("after a reopen: %v; want b's only", snap.Marks)
	}
}
