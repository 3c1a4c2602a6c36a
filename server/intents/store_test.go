package intents

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
	"github.com/bigfleet/libvirt-provider/server/store"
)

func claimed(t *testing.T, f *fakeAPI, j *Journal) *Store {
	t.Helper()
	c, err := j.Claim(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return NewStore(store.NewMemory(), j, c, nil)
}

func creating(id string) record.Machine {
	return record.Machine{ID: id, State: record.Creating, Zone: "z", InstanceType: "small", OperationID: "op-" + id, OpKind: record.OpCreate, StateSince: time.Now()}
}

func mark(machine, shard string, e, s int64) map[record.MarkKey]record.Mark {
	return map[record.MarkKey]record.Mark{{ShardID: shard, MachineID: machine}: {Epoch: e, Sequence: s}}
}

// A Create's acceptance (CREATING and its mark) is in the journal when
// Commit returns; its outcome drops the record and keeps the mark; a
// commit of nothing the journal holds writes nothing.
func TestCommitJournalsCreatingAndMarks(t *testing.T) {
	t.Parallel()
	f, cs := newFakeAPI(t)
	s := claimed(t, f, f.journal(cs, "pod-a"))
	ctx := t.Context()
	if err := s.Commit(ctx, record.Batch{Machines: []record.Machine{creating("m1")}, Marks: mark("m1", "s1", 1, 7)}); err != nil {
		t.Fatal(err)
	}
	c := f.content(t)
	if got := c.Transitional["m1"]; got.OperationID != "op-m1" || got.State != record.Creating {
		t.Fatalf("journal after accept: %+v", c.Transitional)
	}
	if c.Marks[record.MarkKey{ShardID: "s1", MachineID: "m1"}] != (record.Mark{Epoch: 1, Sequence: 7}) {
		t.Fatalf("mark not journaled: %v", c.Marks)
	}
	before := f.updateCount()
	spec := record.Machine{ID: "m2", State: record.Speculative, Zone: "z"}
	if err := s.Commit(ctx, record.Batch{Machines: []record.Machine{spec}}); err != nil {
		t.Fatal(err)
	}
	if f.updateCount() != before {
		t.Fatal("a commit of an untracked SPECULATIVE record wrote the journal")
	}
	idle := creating("m1")
	idle.State = record.Idle
	if err := s.Commit(ctx, record.Batch{Machines: []record.Machine{idle}}); err != nil {
		t.Fatal(err)
	}
	c = f.content(t)
	if _, ok := c.Transitional["m1"]; ok || len(c.Marks) != 1 {
		t.Fatalf("after the outcome: creating %v marks %v", c.Transitional, c.Marks)
	}
	if got := c.Ended["m1"]; got.State != record.Idle || got.OperationID != "op-m1" {
		t.Fatalf("the ended Create is not kept with its operation id: %+v", c.Ended)
	}
	if err := s.Commit(ctx, record.Batch{DropMarks: []record.MarkKey{{ShardID: "s1", MachineID: "m1"}}}); err != nil {
		t.Fatal(err)
	}
	if c = f.content(t); len(c.Marks) != 0 {
		t.Fatalf("dropped mark still journaled: %v", c.Marks)
	}
	snap, err := s.Load(ctx)
	if err != nil || len(snap.Machines) != 2 {
		t.Fatalf("local store: %d machines, %v", len(snap.Machines), err)
	}
}

// Commits that arrive while a write is in flight share the next one.
func TestCommitsCoalesce(t *testing.T) {
	t.Parallel()
	f, cs := newFakeAPI(t)
	s := claimed(t, f, f.journal(cs, "pod-a"))
	f.hold = make(chan struct{})
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	commit := func(i int) {
		wg.Go(func() {
			id := fmt.Sprintf("m%d", i)
			errs <- s.Commit(t.Context(), record.Batch{Machines: []record.Machine{creating(id)}, Marks: mark(id, "s", 1, 1)})
		})
	}
	// The first write is held in flight while the others queue.
	commit(0)
	waitFor(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.waiting == 1 })
	for i := 1; i < n; i++ {
		commit(i)
	}
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.queue) == n-1 })
	close(f.hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if c := f.content(t); len(c.Transitional) != n || len(c.Marks) != n {
		t.Fatalf("journal holds %d records and %d marks of %d", len(c.Transitional), len(c.Marks), n)
	}
	st := s.Stats()
	if st.Writes != 2 || st.Carried != n {
		t.Fatalf("%d commits took %d writes (carried %d), want 2 (the first, then the other %d together)", n, st.Writes, st.Carried, n-1)
	}
}

// A failed write refuses the commits it carried and leaves the journal as
// it was: the refused change never appears, even with the next write.
func TestFailedWriteIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	f, cs := newFakeAPI(t)
	s := claimed(t, f, f.journal(cs, "pod-a"))
	ctx := t.Context()
	f.mu.Lock()
	f.fail = apierrors.NewServiceUnavailable("etcd down")
	f.mu.Unlock()
	err := s.Commit(ctx, record.Batch{Machines: []record.Machine{creating("lost")}})
	if err == nil || !strings.Contains(err.Error(), "etcd down") {
		t.Fatalf("commit over a failing write: %v", err)
	}
	f.mu.Lock()
	f.fail = nil
	f.mu.Unlock()
	if err := s.Commit(ctx, record.Batch{Machines: []record.Machine{creating("kept")}}); err != nil {
		t.Fatal(err)
	}
	c := f.content(t)
	if _, ok := c.Transitional["lost"]; ok {
		t.Fatal("a refused change reached the journal")
	}
	if _, ok := c.Transitional["kept"]; !ok {
		t.Fatal("the next change is missing")
	}
	if st := s.Stats(); st.Failed != 1 {
		t.Fatalf("failed writes = %d, want 1", st.Failed)
	}
}

// Once another replica claims the journal, every write of the old one
// conflicts and fails for good; the new one's content stays.
func TestClaimSupersedesOldWriter(t *testing.T) {
	t.Parallel()
	f, cs := newFakeAPI(t)
	old := claimed(t, f, f.journal(cs, "pod-a"))
	ctx := t.Context()
	if err := old.Commit(ctx, record.Batch{Machines: []record.Machine{creating("m1")}}); err != nil {
		t.Fatal(err)
	}
	start, err := f.journal(cs, "pod-b").Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := start.Transitional["m1"]; !ok {
		t.Fatal("the new leader's claim does not see the accepted Create")
	}
	for range 2 {
		err = old.Commit(ctx, record.Batch{Machines: []record.Machine{creating("late")}})
		if !errors.Is(err, ErrSuperseded) {
			t.Fatalf("old leader's write after the claim: %v, want ErrSuperseded", err)
		}
	}
	if _, ok := f.content(t).Transitional["late"]; ok {
		t.Fatal("the old leader's late write landed")
	}
}

// A write that landed but whose answer was lost (a timeout) is not a
// takeover: the next write re-reads, finds its own claim, and succeeds.
func TestOwnLandedWriteIsNotAConflict(t *testing.T) {
	t.Parallel()
	f, cs := newFakeAPI(t)
	s := claimed(t, f, f.journal(cs, "pod-a"))
	ctx := t.Context()
	f.mu.Lock()
	f.landThenFail = true
	f.mu.Unlock()
	if err := s.Commit(ctx, record.Batch{Machines: []record.Machine{creating("m1")}}); err == nil {
		t.Fatal("a write answered with a timeout was acknowledged")
	}
	if err := s.Commit(ctx, record.Batch{Machines: []record.Machine{creating("m2")}}); err != nil {
		t.Fatalf("next write after our own landed one: %v", err)
	}
	c := f.content(t)
	if _, ok := c.Transitional["m2"]; !ok {
		t.Fatal("m2 missing")
	}
	if _, ok := c.Transitional["m1"]; ok {
		t.Fatal("the unacknowledged m1 is still journaled after the next write (the journal follows the engine)")
	}
}

// A journal that would not fit its ConfigMap is refused before the API
// server sees it, and the commit is not acknowledged.
func TestSizeBound(t *testing.T) {
	t.Parallel()
	f, cs := newFakeAPI(t)
	s := claimed(t, f, f.journal(cs, "pod-a"))
	marks := map[record.MarkKey]record.Mark{}
	for i := range 200000 {
		marks[record.MarkKey{ShardID: fmt.Sprintf("shard-%d", i%7), MachineID: fmt.Sprintf("machine-%08x-%d", i*2654435761, i)}] = record.Mark{Epoch: int64(i * 7919), Sequence: int64(i) << 20}
	}
	err := s.Commit(t.Context(), record.Batch{Marks: marks})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized journal: %v, want ErrTooLarge", err)
	}
	if f.updateCount() != 1 { // the claim only
		t.Fatalf("%d updates reached the API server", f.updateCount())
	}
}

// A missing ConfigMap is an error naming it and what to do.
func TestMissingConfigMap(t *testing.T) {
	t.Parallel()
	f, cs := newFakeAPI(t)
	f.cm = nil
	err := f.journal(cs, "pod-a").Check(t.Context())
	if err == nil || !strings.Contains(err.Error(), "ns/prov-intents does not exist") {
		t.Fatalf("Check of a missing ConfigMap: %v", err)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// A machine whose transition ended stays in the journal as last committed
// (a later change to it too), so a new leader answers a replay with its
// operation id; a new transition moves it back; the ended are bounded in
// number and age.
func TestEndedMachinesAreKeptBounded(t *testing.T) {
	t.Parallel()
	f, cs := newFakeAPI(t)
	s := claimed(t, f, f.journal(cs, "pod-a"))
	ctx := t.Context()
	now := time.Now()
	drained := func(id string, since time.Time) record.Machine {
		m := creating(id)
		m.State, m.OpKind, m.StateSince = record.Draining, record.OpDrain, since
		return m
	}
	d := drained("d1", now)
	if err := s.Commit(ctx, record.Batch{Machines: []record.Machine{d}}); err != nil {
		t.Fatal(err)
	}
	d.State = record.Idle
	if err := s.Commit(ctx, record.Batch{Machines: []record.Machine{d}}); err != nil {
		t.Fatal(err)
	}
	if got := f.content(t).Ended["d1"]; got.State != record.Idle || got.OpKind != record.OpDrain {
		t.Fatalf("ended Drain: %+v", got)
	}
	d.State, d.LastError = record.Failed, "vanished"
	if err := s.Commit(ctx, record.Batch{Machines: []record.Machine{d}}); err != nil {
		t.Fatal(err)
	}
	if got := f.content(t).Ended["d1"]; got.State != record.Failed {
		t.Fatalf("a later change of an ended machine not journaled: %+v", got)
	}
	d.State = record.Deleting
	if err := s.Commit(ctx, record.Batch{Machines: []record.Machine{d}}); err != nil {
		t.Fatal(err)
	}
	if c := f.content(t); c.Transitional["d1"].State != record.Deleting || len(c.Ended) != 0 {
		t.Fatalf("a new transition of an ended machine: transitional %v ended %v", c.Transitional, c.Ended)
	}
	// MaxEnded+10 more end, one of them too old: the newest MaxEnded stay.
	var b record.Batch
	for i := range MaxEnded + 10 {
		b.Machines = append(b.Machines, drained(fmt.Sprintf("e%03d", i), now.Add(time.Duration(i)*time.Millisecond)))
	}
	old := drained("old", now.Add(-EndedFor-time.Minute))
	b.Machines = append(b.Machines, old)
	if err := s.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	for i := range b.Machines {
		b.Machines[i].State = record.Idle
	}
	if err := s.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	c := f.content(t)
	if len(c.Ended) != MaxEnded {
		t.Fatalf("%d ended kept, want %d", len(c.Ended), MaxEnded)
	}
	if _, ok := c.Ended["old"]; ok {
		t.Fatal("an ended machine older than EndedFor kept")
	}
	if _, ok := c.Ended["e009"]; ok {
		t.Fatal("the oldest ended kept past the bound")
	}
	if _, ok := c.Ended[fmt.Sprintf("e%03d", MaxEnded+9)]; !ok {
		t.Fatal("the newest ended dropped")
	}
}
