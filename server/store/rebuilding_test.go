package store

import (
	"context"
	"maps"
	"path/filepath"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// The zones marked rebuilding survive a reopen and a compaction, and a
// clear removes them (issue 38 case 5: an intact state file proves only
// what a whole-zone listing confirmed).
func TestRebuildingSurvives(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	ctx := context.Background()
	s, err := OpenBolt(path, BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Commit(ctx, record.Batch{Rebuilding: map[string]bool{"zone-a": true, "zone-b": true}}))
	must(s.Commit(ctx, record.Batch{Rebuilding: map[string]bool{"zone-b": false}}))
	must(s.Close())
	if _, err := Compact(path, CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err = OpenBolt(path, BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	snap, err := s.Load(ctx)
	must(err)
	if want := map[string]bool{"zone-a": true}; !maps.Equal(snap.Rebuilding, want) {
		t.Fatalf("rebuilding after reopen and compaction: %v, want %v", snap.Rebuilding, want)
	}
	m := NewMemory()
	must(m.Commit(ctx, record.Batch{Rebuilding: map[string]bool{"z": true}}))
	must(m.Commit(ctx, record.Batch{Rebuilding: map[string]bool{"z": false, "y": true}}))
	if snap, _ := m.Load(ctx); !maps.Equal(snap.Rebuilding, map[string]bool{"y": true}) {
		t.Fatalf("memory store: %v", snap.Rebuilding)
	}
}
