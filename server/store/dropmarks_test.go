package store

import (
	"path/filepath"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// TestDropMarks: a batch's DropMarks delete those fence marks durably
// (an operator's fence clear, issue 39), in both stores, leaving the
// others.
func TestDropMarks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a := record.MarkKey{ShardID: "a", MachineID: "m0"}
	b := record.MarkKey{ShardID: "b", MachineID: "m0"}
	path := filepath.Join(t.TempDir(), "state.db")
	bolt := openBolt(t, path, BoltOptions{})
	for _, st := range []record.Store{bolt, NewMemory()} {
		must(t, st.Commit(ctx, record.Batch{Marks: map[record.MarkKey]record.Mark{a: {Epoch: 1, Sequence: 2}, b: {Epoch: 3}}}))
		must(t, st.Commit(ctx, record.Batch{DropMarks: []record.MarkKey{a}}))
		snap, err := st.Load(ctx)
		must(t, err)
		if len(snap.Marks) != 1 || snap.Marks[b] != (record.Mark{Epoch: 3}) {
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
