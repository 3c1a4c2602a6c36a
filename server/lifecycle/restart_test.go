package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func TestRestartKeepsEverythingAndOperationIDs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	f.toConfigured("m001", "c1")
	before, _ := f.e.Get(t.Context(), "m001")
	f.e.Close()
	f.start(3)
	after, _ := f.e.Get(t.Context(), "m001")
	if after.State != record.Configured || after.OperationID != before.OperationID || after.Cluster != "c1" {
		t.Fatalf("after restart: %+v", after)
	}
	ack, err := f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m001", ClusterID: "c1"})
	if err != nil || ack.OperationID != before.OperationID {
		t.Fatalf("retry across restart: %v %s", err, ack.OperationID)
	}
	l, _ := f.e.List(t.Context(), record.ListQuery{})
	if len(l.Machines) != 3 {
		t.Fatalf("restart re-seeded or lost: %d machines", len(l.Machines))
	}
}

func TestRestartResumesOrFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	f.toIdle("m002")
	release := f.be.hold(record.OpCreate)
	f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000"})
	releaseCfg := f.be.hold(record.OpConfigure)
	f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m002", ClusterID: "c"})
	f.e.Close() // the "crash": transitions stay in flight in the store
	release()
	releaseCfg()
	f.start(3)
	f.waitState("m000", record.Idle)
	m := f.waitState("m002", record.Failed)
	if !strings.Contains(m.LastError, "restart") {
		t.Fatalf("configure interrupted by restart: last_error %q", m.LastError)
	}
}

func TestSeedGrowsButNeverShrinks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	f.toIdle("m002")
	f.e.Close()
	f.start(1) // offerings shrank
	if l, _ := f.e.List(t.Context(), record.ListQuery{}); len(l.Machines) != 3 {
		t.Fatalf("shrinking lost machines: %d", len(l.Machines))
	}
	f.e.Close()
	f.start(5)
	if l, _ := f.e.List(t.Context(), record.ListQuery{}); len(l.Machines) != 5 {
		t.Fatalf("growing: %d", len(l.Machines))
	}
	if m, _ := f.e.Get(t.Context(), "m002"); m.State != record.Idle {
		t.Fatalf("existing machine reset: %s", m.State)
	}
}

// TestCloseDuringMutations: Close runs while 64 goroutines create and
// delete (launching transitions as it stops them). Every call is accepted
// or refused with a code that says why (Aborted: out of position;
// Unavailable: shutting down), every call made after Close returned is
// refused as shutting down, and after a restart every machine settles in
// a resting state, none FAILED.
func TestCloseDuringMutations(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 64)
	const enoughAccepted = 64 // Close waits for this many acks: transitions are running
	var accepted atomic.Int64
	busy := make(chan struct{})
	var busyOnce sync.Once
	var closed atomic.Bool
	check := func(id, what string, afterClose bool, err error) {
		switch {
		case err == nil && !afterClose:
			if accepted.Add(1) >= enoughAccepted {
				busyOnce.Do(func() { close(busy) })
			}
		case afterClose && (codeOf(err) != record.CodeUnavailable || !strings.Contains(err.Error(), "shutting down")):
			t.Errorf("%s %s after Close returned: %v, want Unavailable (shutting down)", what, id, err)
		case err != nil && codeOf(err) != record.CodeAborted && codeOf(err) != record.CodeUnavailable:
			t.Errorf("%s %s: %v (code %d), want it accepted, Aborted or Unavailable", what, id, err, codeOf(err))
		}
	}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			id := fmt.Sprintf("m%03d", i)
			// Until one round after Close returned (bounded, should Close hang).
			for range 100_000 {
				after := closed.Load()
				_, err := f.e.Create(context.Background(), record.CreateRequest{MachineID: id})
				check(id, "Create", after, err)
				_, err = f.e.Delete(context.Background(), record.DeleteRequest{MachineID: id})
				check(id, "Delete", after, err)
				if after {
					return
				}
			}
			t.Errorf("%s: Close never returned", id)
		})
	}
	select {
	case <-busy:
	case <-time.After(10 * time.Second):
		t.Fatalf("only %d mutations accepted in 10s", accepted.Load())
	}
	f.e.Close() // must not race the launches (WaitGroup reuse)
	closed.Store(true)
	wg.Wait()

	f.start(64)
	for i := range 64 {
		m, err := f.e.Get(context.Background(), fmt.Sprintf("m%03d", i))
		if err != nil {
			t.Fatal(err)
		}
		if m.State.Transitional() {
			m = f.waitState(m.ID, map[record.State]record.State{record.Creating: record.Idle, record.Deleting: record.Speculative}[m.State])
		}
		if m.State != record.Idle && m.State != record.Speculative {
			t.Errorf("%s after restart: %s (last_error %q), want IDLE or SPECULATIVE", m.ID, m.State, m.LastError)
		}
	}
}

type panickyStore struct {
	*memStore
	panicNext atomic.Bool
}

func (s *panickyStore) Commit(ctx context.Context, b record.Batch) error {
	if s.panicNext.Swap(false) {
		panic("disk controller on fire")
	}
	return s.memStore.Commit(ctx, b)
}

// A store that panics costs that one mutation (Unavailable), never the
// publication of every later change.
func TestStorePanicDoesNotStallPublication(t *testing.T) {
	t.Parallel()
	st := &panickyStore{memStore: newMemStore()}
	e, err := New(Config{Provider: "test", Seed: seed(2)}, st, newTestBackend())
	if err != nil {
		t.Fatal(err)
	}
	startListed(e, t.Context())
	defer e.Close()
	st.panicNext.Store(true)
	if _, err := e.Create(t.Context(), record.CreateRequest{MachineID: "m000"}); codeOf(err) != record.CodeUnavailable {
		t.Fatalf("create through a panicking store: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := e.Create(context.Background(), record.CreateRequest{MachineID: "m001"}); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a later mutation waits forever behind the failed one")
	}
}
