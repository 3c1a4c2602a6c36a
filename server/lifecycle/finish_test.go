package lifecycle

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// waitFor polls cond (bounded) and fails the test with what if it never holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Rule 1: an outcome whose commit fails is retried, and the machine reaches
// the real outcome once the store is back (issue 10, path 2: it used to stay
// CREATING forever).
func TestOutcomeCommitIsRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	release := f.be.hold(record.OpCreate)
	if _, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	f.st.setFail(errors.New("write /state.db: input/output error"))
	before := f.st.attempted()
	release()
	waitFor(t, "the outcome commit to be attempted twice", func() bool { return f.st.attempted() >= before+2 })
	if m, _ := f.e.Get(t.Context(), "m000"); m.State != record.Creating {
		t.Fatalf("while the store is down the record must stay as stored, got %s", m.State)
	}
	f.st.setFail(nil)
	m := f.waitState("m000", record.Idle)
	if m.LastError != "" || m.Host.Ref == "" {
		t.Fatalf("recovered outcome: %+v", m)
	}
	if s := f.st.stored("m000"); s.State != record.Idle {
		t.Fatalf("stored state %s", s.State)
	}
}

// Rule 1: when the bounded retry gives up, the outcome is parked and the
// sweep records the real outcome (IDLE), never FAILED for a store fault.
func TestSweepRecordsParkedOutcome(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, func(c *Config) { c.CommitRetry = 20 * time.Millisecond })
	release := f.be.hold(record.OpCreate)
	f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000"})
	f.st.setFail(errors.New("disk gone"))
	release()
	waitFor(t, "the outcome to be parked", func() bool { return f.e.parkedCount() == 1 })
	f.e.Sweep() // store still down: nothing changes, the outcome stays parked
	if m, _ := f.e.Get(t.Context(), "m000"); m.State != record.Creating || f.e.parkedCount() != 1 {
		t.Fatalf("sweep during the outage: %s, parked %d", m.State, f.e.parkedCount())
	}
	f.st.setFail(nil)
	f.e.Sweep()
	if m, _ := f.e.Get(t.Context(), "m000"); m.State != record.Idle || f.e.parkedCount() != 0 {
		t.Fatalf("after sweep: %s (%q), parked %d", m.State, m.LastError, f.e.parkedCount())
	}
}

// Rule 1: a transitional record past its deadline whose run is gone (and
// left no outcome) is finished FAILED by the sweep, saying why; one whose
// run is still live is left alone whatever the clock says.
func TestSweepFinishesOrphans(t *testing.T) {
	t.Parallel()
	var skew atomic.Int64 // the engine's clock runs this far ahead
	now := time.Now()
	st := newMemStore()
	orphan := seed(2)
	orphan[0].State, orphan[0].OpKind, orphan[0].OperationID = record.Creating, record.OpCreate, "op-orphan"
	orphan[0].OpDeadline = now.Add(-time.Second)
	st.machines["m000"] = orphan[0]
	e, err := New(Config{Provider: "test", Seed: seed(2), Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }}, st, newTestBackend())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	be := e.be.(*testBackend)
	release := be.hold(record.OpCreate)
	defer release()
	e.Reconcile(t.Context())                                       // the first listing, which mutations wait for
	e.Create(t.Context(), record.CreateRequest{MachineID: "m001"}) // live run, gated
	skew.Store(int64(time.Hour))                                   // both deadlines passed on the engine's clock
	e.Sweep()
	m0, _ := e.Get(t.Context(), "m000")
	if m0.State != record.Failed || !strings.Contains(m0.LastError, "timed out") || !strings.Contains(m0.LastError, "could not be recorded") {
		t.Fatalf("orphan: %s %q", m0.State, m0.LastError)
	}
	if h := m0.History; len(h) != 0 && h[len(h)-1].Outcome == "running" {
		t.Fatalf("history left running: %+v", h)
	}
	if m1, _ := e.Get(t.Context(), "m001"); m1.State != record.Creating {
		t.Fatalf("sweep touched a live run: %s %q", m1.State, m1.LastError)
	}
}

// BenchmarkSweepIdleFleet is the sweep's cost every SweepInterval on a
// 100k-machine fleet with nothing to do (one scan of the index).
func BenchmarkSweepIdleFleet(b *testing.B) {
	e, err := New(Config{Provider: "test", Seed: seed(100_000)}, newMemStore(), newTestBackend())
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for b.Loop() {
		if e.Sweep() != 0 {
			b.Fatal("sweep changed an idle fleet")
		}
	}
}
