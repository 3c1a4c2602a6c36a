package store

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithCancel(t.Context())
}

func openBolt(t testing.TB, path string, opts BoltOptions) *Bolt {
	t.Helper()
	s, err := OpenBolt(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBoltReopenKeepsEverything(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	s := openBolt(t, path, BoltOptions{})
	ms, marks := roundTripCases(), roundTripMarks()
	must(t, s.Commit(t.Context(), record.Batch{Machines: ms, Marks: marks}))
	id := s.StoreID()
	must(t, s.Close())

	s = openBolt(t, path, BoltOptions{})
	defer s.Close()
	snap, err := s.Load(t.Context())
	must(t, err)
	if snap.StoreID != id {
		t.Fatalf("store id changed across reopen: %x -> %x", id, snap.StoreID)
	}
	requireSnapshot(t, snap, ms, marks)
}

func TestBoltNewFileNewID(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := openBolt(t, filepath.Join(dir, "a.db"), BoltOptions{})
	defer a.Close()
	b := openBolt(t, filepath.Join(dir, "b.db"), BoltOptions{})
	defer b.Close()
	if a.StoreID() == 0 || a.StoreID() == b.StoreID() {
		t.Fatalf("store ids %x and %x: want distinct and non-zero", a.StoreID(), b.StoreID())
	}
}

// bbolt's flock is per open file description, so a second open from this
// process contends exactly like a second process would.
func TestBoltLockedFileFailsFast(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	s := openBolt(t, path, BoltOptions{})
	defer s.Close()
	start := time.Now()
	_, err := OpenBolt(path, BoltOptions{LockTimeout: 100 * time.Millisecond})
	if err == nil {
		t.Fatal("second open of a locked file succeeded")
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("error %q should name the path and say it is locked", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("second open took %s", d)
	}
}

// 64 concurrent Commits are all durable and share transactions. The first
// transaction's hook holds the committer briefly so the rest queue up
// behind it, which is exactly the situation a slow fsync creates.
func TestBoltConcurrentCommitsCoalesce(t *testing.T) {
	t.Parallel()
	const n = 64
	path := filepath.Join(t.TempDir(), "state.db")
	var txs, records atomic.Int64
	s := openBolt(t, path, BoltOptions{OnCommit: func(d time.Duration, r int) {
		if txs.Add(1) == 1 {
			time.Sleep(50 * time.Millisecond)
		}
		records.Add(int64(r))
	}})
	var wg sync.WaitGroup
	want := make([]record.Machine, n)
	marks := make(map[record.MarkKey]record.Mark, n)
	errs := make(chan error, n)
	for i := range n {
		want[i] = sampleMachine(fmt.Sprintf("m%02d", i))
		k := record.MarkKey{ShardID: "s", MachineID: want[i].ID}
		mark := record.Mark{Epoch: 1, Sequence: int64(i)}
		marks[k] = mark
		wg.Go(func() {
			errs <- s.Commit(t.Context(), record.Batch{Machines: want[i : i+1],
				Marks: map[record.MarkKey]record.Mark{k: mark}})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	st := s.Stats()
	if st.Commits != n || st.Transactions >= n || txs.Load() != int64(st.Transactions) {
		t.Fatalf("stats %+v (hook saw %d tx): want %d commits in fewer transactions", st, txs.Load(), n)
	}
	if records.Load() != 2*n {
		t.Fatalf("hook saw %d records, want %d", records.Load(), 2*n)
	}
	t.Logf("%d commits in %d transactions", st.Commits, st.Transactions)
	must(t, s.Close())

	s = openBolt(t, path, BoltOptions{})
	defer s.Close()
	snap, err := s.Load(t.Context())
	must(t, err)
	requireSnapshot(t, snap, want, marks)
}

// Close waits for commits already accepted; each caller gets either success
// (and its record is on disk) or ErrClosed (and nothing was written for it).
func TestBoltCloseWaitsForInFlight(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	s := openBolt(t, path, BoltOptions{})
	const n = 32
	ok := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			err := s.Commit(t.Context(), record.Batch{Machines: []record.Machine{sampleMachine(fmt.Sprint(i))}})
			ok[i] = err == nil
		})
	}
	time.Sleep(time.Millisecond)
	must(t, s.Close())
	wg.Wait()

	s = openBolt(t, path, BoltOptions{})
	defer s.Close()
	snap, err := s.Load(t.Context())
	must(t, err)
	got := byID(snap.Machines)
	for i := range n {
		if _, stored := got[fmt.Sprint(i)]; ok[i] && !stored {
			t.Errorf("acknowledged commit %d missing after Close", i)
		}
	}
}
