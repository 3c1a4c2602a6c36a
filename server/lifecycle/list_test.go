package lifecycle

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/index"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func TestPagingNoGapNoDuplicate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 100)
	ctx := t.Context()
	// Mutations run concurrently with the walk: a machine may show up again
	// (it changed) but every machine shows up at least once, and within one
	// unchanged revision never twice.
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < 100; i += 3 {
			f.e.Create(ctx, record.CreateRequest{MachineID: fmt.Sprintf("m%03d", i)})
		}
	})
	seen := map[string]uint64{}
	var cursor []byte
	for range 1000 {
		page, err := f.e.List(ctx, record.ListQuery{MaxResults: 7, Since: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page.Machines {
			if rev, ok := seen[m.ID]; ok && rev == m.Revision {
				t.Fatalf("duplicate %s at revision %d", m.ID, rev)
			}
			seen[m.ID] = m.Revision
		}
		cursor = page.Revision
		if len(page.Machines) == 0 {
			break
		}
	}
	wg.Wait()
	if len(seen) != 100 {
		t.Fatalf("walk saw %d machines, want 100", len(seen))
	}
}

func TestDeltaAndGarbageCursors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 10)
	ctx := t.Context()
	full, _ := f.e.List(ctx, record.ListQuery{})
	if len(full.Machines) != 10 {
		t.Fatalf("full list has %d", len(full.Machines))
	}
	empty, _ := f.e.List(ctx, record.ListQuery{Since: full.Revision})
	if len(empty.Machines) != 0 {
		t.Fatalf("nothing changed but delta has %d", len(empty.Machines))
	}
	f.toIdle("m004")
	delta, _ := f.e.List(ctx, record.ListQuery{Since: full.Revision})
	if len(delta.Machines) != 1 || delta.Machines[0].ID != "m004" || delta.Machines[0].State != record.Idle {
		t.Fatalf("delta = %+v", delta.Machines)
	}
	mutated := append([]byte(nil), full.Revision...)
	mutated[10] ^= 1
	foreign := index.EncodeCursor(7, 1)
	for name, c := range map[string][]byte{"garbage": []byte("xyz"), "empty": {}, "zero": make([]byte, 1+8+8+4),
		"mutated": mutated, "foreign": foreign, "future": index.EncodeCursor(42, 1<<40)} {
		l, err := f.e.List(ctx, record.ListQuery{Since: c})
		if err != nil || len(l.Machines) != 10 {
			t.Errorf("%s cursor: %v, %d machines (want full list)", name, err, len(l.Machines))
		}
	}
	filtered, _ := f.e.List(ctx, record.ListQuery{States: []record.State{record.Idle, record.Failed}})
	if len(filtered.Machines) != 1 {
		t.Fatalf("state filter: %d", len(filtered.Machines))
	}
	capped, _ := f.e.List(ctx, record.ListQuery{MaxResults: 3})
	if len(capped.Machines) != 3 {
		t.Fatalf("max_results: %d", len(capped.Machines))
	}
}

// Revisions are stored with the records, so a cursor stays valid across a
// restart on the same store: nothing changed → empty delta; one change →
// exactly that machine.
func TestCursorSurvivesRestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 5)
	f.toIdle("m001")
	full, _ := f.e.List(t.Context(), record.ListQuery{})
	f.e.Close()
	f.start(5)
	l, _ := f.e.List(t.Context(), record.ListQuery{Since: full.Revision})
	if len(l.Machines) != 0 {
		t.Fatalf("restart with no change: delta has %d machines", len(l.Machines))
	}
	again, _ := f.e.List(t.Context(), record.ListQuery{})
	if got, want := ids(again.Machines), ids(full.Machines); got != want {
		t.Fatalf("restart changed the list order:\n%s\n%s", got, want)
	}
	f.toIdle("m002")
	l, _ = f.e.List(t.Context(), record.ListQuery{Since: full.Revision})
	if len(l.Machines) != 1 || l.Machines[0].ID != "m002" {
		t.Fatalf("delta after restart: %v", ids(l.Machines))
	}
}

// A full List never hides a machine, even while other changes are being
// committed concurrently.
func TestFullListSeesEveryMachineUnderLoad(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 50)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			id := fmt.Sprintf("m%03d", i)
			for ctx.Err() == nil {
				f.e.Create(ctx, record.CreateRequest{MachineID: id})
				f.e.Delete(ctx, record.DeleteRequest{MachineID: id})
			}
		})
	}
	for range 200 {
		if l, _ := f.e.List(t.Context(), record.ListQuery{}); len(l.Machines) != 50 {
			t.Fatalf("full list under load has %d machines, want 50", len(l.Machines))
		}
	}
	cancel()
	wg.Wait()
}

func ids(ms []record.Machine) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString(m.ID + " ")
	}
	return b.String()
}

func FuzzDecodeCursor(f *testing.F) {
	f.Add(index.EncodeCursor(1, 2))
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		rev, ok := index.DecodeCursor(b, 1)
		if ok {
			if got, _ := index.DecodeCursor(index.EncodeCursor(1, rev), 1); got != rev {
				t.Fatal("round trip")
			}
			if string(index.EncodeCursor(1, rev)) != string(b) {
				t.Fatal("a cursor that decodes must be one we could have issued")
			}
		}
	})
}

func FuzzValidateConfigure(f *testing.F) {
	f.Add("m", "c", []byte("blob"), "k", "v", "s", int64(0), int64(0))
	f.Fuzz(func(t *testing.T, id, cluster string, blob []byte, k, v, shard string, e, s int64) {
		r := record.ConfigureRequest{MachineID: id, ClusterID: cluster, BootstrapBlob: blob,
			ShardMetadata: map[string]string{k: v}, Token: record.Token{ShardID: shard, Epoch: e, Sequence: s}}
		err := firstErr(record.ValidateID("machine_id", r.MachineID), record.ValidateToken(r.Token), record.ValidateConfigure(r))
		if err != nil && err.Code != record.CodeInvalid {
			t.Fatalf("validation produced code %d", err.Code)
		}
		if err == nil && (id == "" || cluster == "" || (shard != "" && (e < 0 || s < 0))) {
			t.Fatal("invalid request passed validation")
		}
	})
}

// jitterStore finishes commits after a random delay, so concurrent commits
// complete out of revision order, as group commits may.
type jitterStore struct{ *memStore }

func (s jitterStore) Commit(ctx context.Context, b record.Batch) error {
	time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
	return s.memStore.Commit(ctx, b)
}

// TestCursorsFollowOutOfOrderCommits: while commits finish out of order, a
// client following the fleet with since_revision misses no change: once
// the churn stops and it catches up, it holds every machine's final
// version; and a full List always has every machine.
func TestCursorsFollowOutOfOrderCommits(t *testing.T) {
	t.Parallel()
	st := jitterStore{newMemStore()}
	e, err := New(Config{Provider: "test", Seed: seed(40)}, st, newTestBackend())
	if err != nil {
		t.Fatal(err)
	}
	startListed(e, t.Context())
	defer e.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			id := fmt.Sprintf("m%03d", i)
			for ctx.Err() == nil {
				e.Create(ctx, record.CreateRequest{MachineID: id})
				e.Delete(ctx, record.DeleteRequest{MachineID: id})
			}
		})
	}
	seen := map[string]uint64{}
	var cursor []byte
	follow := func() {
		page, err := e.List(t.Context(), record.ListQuery{Since: cursor, MaxResults: 5})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page.Machines {
			seen[m.ID] = m.Revision
		}
		cursor = page.Revision
	}
	for ctx.Err() == nil {
		follow()
		if l, _ := e.List(t.Context(), record.ListQuery{}); len(l.Machines) != 40 {
			t.Fatalf("full list has %d machines, want 40", len(l.Machines))
		}
	}
	wg.Wait()
	e.Close() // no more completions
	for range 100 {
		follow()
	}
	for i := range 40 {
		id := fmt.Sprintf("m%03d", i)
		m, _ := e.Get(t.Context(), id)
		if seen[id] != m.Revision {
			t.Fatalf("%s: follower has revision %d, machine is at %d: a change was skipped", id, seen[id], m.Revision)
		}
	}
}
