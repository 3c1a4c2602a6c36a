package store

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// stores runs a behaviour every record.Store must have against both
// implementations.
func stores(t *testing.T, f func(t *testing.T, s record.Store)) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		s := NewMemory()
		t.Cleanup(func() { s.Close() })
		f(t, s)
	})
	t.Run("bolt", func(t *testing.T) {
		t.Parallel()
		s, err := OpenBolt(filepath.Join(t.TempDir(), "state.db"), BoltOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		f(t, s)
	})
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s record.Store) {
		ms, marks := roundTripCases(), roundTripMarks()
		if err := s.Commit(t.Context(), record.Batch{Machines: ms, Marks: marks}); err != nil {
			t.Fatal(err)
		}
		snap, err := s.Load(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if snap.StoreID == 0 {
			t.Error("store id is zero")
		}
		requireSnapshot(t, snap, ms, marks)
	})
}

func TestCommitReplacesAndKeepsOthers(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s record.Store) {
		a, b := sampleMachine("a"), sampleMachine("b")
		k := record.MarkKey{ShardID: "s", MachineID: "a"}
		must(t, s.Commit(t.Context(), record.Batch{Machines: []record.Machine{a, b},
			Marks: map[record.MarkKey]record.Mark{k: {Epoch: 1, Sequence: 1}}}))
		a2 := a.Clone()
		a2.State, a2.Cluster, a2.ShardMetadata = record.Idle, "", nil
		must(t, s.Commit(t.Context(), record.Batch{Machines: []record.Machine{a2},
			Marks: map[record.MarkKey]record.Mark{k: {Epoch: 2, Sequence: 0}}}))
		must(t, s.Commit(t.Context(), record.Batch{})) // empty batch is a no-op
		snap, err := s.Load(t.Context())
		must(t, err)
		requireSnapshot(t, snap, []record.Machine{a2, b},
			map[record.MarkKey]record.Mark{k: {Epoch: 2, Sequence: 0}})
	})
}

// The store's copy is its own: neither the caller's maps after Commit nor
// a loaded snapshot can change what is stored.
func TestNoAliasing(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s record.Store) {
		m := sampleMachine("m")
		want := m.Clone()
		must(t, s.Commit(t.Context(), record.Batch{Machines: []record.Machine{m}}))
		m.ShardMetadata["nul"] = "changed"
		m.History[0].Outcome = "changed"
		snap, err := s.Load(t.Context())
		must(t, err)
		snap.Machines[0].Labels["pool"] = "changed"
		snap.Machines[0].History[1].Outcome = "changed"
		snap, err = s.Load(t.Context())
		must(t, err)
		requireSnapshot(t, snap, []record.Machine{want}, map[record.MarkKey]record.Mark{})
	})
}

func TestInvalidBatchRejected(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s record.Store) {
		bad := []record.Batch{
			{Machines: []record.Machine{{State: record.Idle}}},
		}
		for i, b := range bad {
			if err := s.Commit(t.Context(), b); err == nil {
				t.Errorf("bad batch %d accepted", i)
			}
		}
		snap, err := s.Load(t.Context())
		must(t, err)
		requireSnapshot(t, snap, nil, map[record.MarkKey]record.Mark{})
	})
}

func TestCommitAfterClose(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s record.Store) {
		must(t, s.Close())
		must(t, s.Close()) // idempotent
		err := s.Commit(t.Context(), record.Batch{Machines: []record.Machine{sampleMachine("x")}})
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Commit after Close = %v, want ErrClosed", err)
		}
		if _, err := s.Load(t.Context()); !errors.Is(err, ErrClosed) {
			t.Fatalf("Load after Close = %v, want ErrClosed", err)
		}
	})
}

func TestCancelledContext(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s record.Store) {
		ctx, cancel := contextWithCancel(t)
		cancel()
		if err := s.Commit(ctx, record.Batch{Machines: []record.Machine{sampleMachine("x")}}); err == nil {
			t.Fatal("Commit with cancelled context succeeded")
		}
	})
}

func TestMemoryStoreIDsDiffer(t *testing.T) {
	t.Parallel()
	a, _ := NewMemory().Load(t.Context())
	b, _ := NewMemory().Load(t.Context())
	if a.StoreID == b.StoreID {
		t.Fatal("two memory stores share an id")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
