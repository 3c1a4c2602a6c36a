package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/reconcile"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// errKilled cuts a Delete after its intent, as a provider SIGKILLed there
// would; transient, so the engine keeps the machine DELETING meanwhile.
var errKilled = fmt.Errorf("provider killed mid-Delete: %w", backend.ErrHostUnavailable)

// cutAndLoseState runs accept (a Delete or a Release of id) on e, lets the
// backend cut it after the intent is on the VM, stops e as a kill would,
// and returns a provider rebuilt on be from an empty state file, started
// and listed once, with the Delete's operation id.
func cutAndLoseState(t *testing.T, e *Engine, be *fake.Backend, id string, accept func() (record.Ack, error)) (*Engine, string) {
	t.Helper()
	be.SetFailure(fake.OpDeleteCut, id, errKilled)
	ack, err := accept()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the intent on the VM", func() bool { vm, _ := be.VM(id); return vm.DeleteOperationID == ack.OperationID })
	kill, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	e.Shutdown(kill) // the Delete is cut: its record never reaches the store's SPECULATIVE
	cancel()
	be.SetFailure(fake.OpDeleteCut, id, nil)

	e2 := newStreamEngine(t, be, 2) // a new, empty store: the state file is lost
	if m, _ := e2.Get(t.Context(), id); m.State != record.Speculative {
		t.Fatalf("rebuilt record before listing: %s", m.State)
	}
	startListed(e2, context.Background())
	return e2, ack.OperationID
}

// checkResumed: after the rebuild the machine is SPECULATIVE and never was
// IDLE, its domain is gone, the history says the Delete was resumed under
// its own operation id, and another pass changes nothing.
func checkResumed(t *testing.T, e *Engine, be *fake.Backend, id, op string) {
	t.Helper()
	waitFor(t, "the domain removed", func() bool { _, ok := be.VM(id); return !ok })
	e.Reconcile(t.Context())
	m, err := e.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != record.Speculative {
		t.Fatalf("machine after the rebuild: %s (last_error %q), want SPECULATIVE: a Delete begun on the host must not be undone", m.State, m.LastError)
	}
	var resumed, finished bool
	for _, h := range m.History {
		if h.To == record.Idle || h.To == record.Configured {
			t.Fatalf("history shows the machine adopted: %+v", h)
		}
		resumed = resumed || (h.Outcome == reconcile.OutcomeDeleteResumed && h.OperationID == op)
		finished = finished || h.Outcome == reconcile.OutcomeDeleteFinished
	}
	if !resumed || !finished {
		t.Fatalf("history %+v: want %s (op %s) and %s", m.History, reconcile.OutcomeDeleteResumed, op, reconcile.OutcomeDeleteFinished)
	}
	if _, ok := be.VM(id); ok {
		t.Fatal("the domain is back")
	}
}

// TestDeleteSurvivesLostState (issue 38 case 6): a Delete accepted and cut
// after it recorded its intent on the host, then the state file lost: the
// rebuilt provider resumes the Delete instead of adopting the domain IDLE,
// and BigFleet's retried Delete is acknowledged as the one it sent.
func TestDeleteSurvivesLostState(t *testing.T) {
	t.Parallel()
	be := fake.New(fake.Options{})
	e := newStreamEngine(t, be, 2)
	startListed(e, context.Background())
	if _, err := e.Create(t.Context(), record.CreateRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m000 IDLE", func() bool { m, _ := e.Get(t.Context(), "m000"); return m.State == record.Idle })

	e2, op := cutAndLoseState(t, e, be, "m000", func() (record.Ack, error) {
		return e.Delete(t.Context(), record.DeleteRequest{MachineID: "m000"})
	})
	checkResumed(t, e2, be, "m000", op)
	ack, err := e2.Delete(t.Context(), record.DeleteRequest{MachineID: "m000"})
	if err != nil || ack.OperationID != op {
		t.Fatalf("BigFleet's retried Delete: %+v %v, want acknowledged as %s", ack, err, op)
	}
	// The slot is free again: a Create builds a new domain.
	if _, err := e2.Create(t.Context(), record.CreateRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m000 IDLE again", func() bool { m, _ := e2.Get(t.Context(), "m000"); return m.State == record.Idle })
}

// TestReleaseSurvivesLostState: the same for an operator's Release of a
// FAILED machine (admin ReleaseMachine calls Engine.Release).
func TestReleaseSurvivesLostState(t *testing.T) {
	t.Parallel()
	be := fake.New(fake.Options{})
	e := newStreamEngine(t, be, 2)
	startListed(e, context.Background())
	be.SetFailure(fake.OpConfigure, "m000", errors.New("hook exited with status 3"))
	if _, err := e.Create(t.Context(), record.CreateRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m000 IDLE", func() bool { m, _ := e.Get(t.Context(), "m000"); return m.State == record.Idle })
	if _, err := e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: "c"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m000 FAILED", func() bool { m, _ := e.Get(t.Context(), "m000"); return m.State == record.Failed })

	e2, op := cutAndLoseState(t, e, be, "m000", func() (record.Ack, error) { return e.Release(t.Context(), "m000") })
	checkResumed(t, e2, be, "m000", op)
}

// TestResumedDeleteWaitsForItsHost: a Delete cut on a host that then goes
// dark is not adopted while the host is unreachable, and resumes once it
// answers.
func TestResumedDeleteWaitsForItsHost(t *testing.T) {
	t.Parallel()
	be := fake.New(fake.Options{})
	e := newStreamEngine(t, be, 2)
	startListed(e, context.Background())
	if _, err := e.Create(t.Context(), record.CreateRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m000 IDLE", func() bool { m, _ := e.Get(t.Context(), "m000"); return m.State == record.Idle })
	be.SetFailure(fake.OpDeleteCut, "m000", errKilled)
	ack, err := e.Delete(t.Context(), record.DeleteRequest{MachineID: "m000"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the intent on the VM", func() bool { vm, _ := be.VM("m000"); return vm.DeleteOperationID == ack.OperationID })
	kill, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	e.Shutdown(kill)
	cancel()
	be.SetFailure(fake.OpDeleteCut, "m000", nil)
	be.SetZoneDown("zone-a", true)

	e2 := newStreamEngine(t, be, 2)
	e2.Start(context.Background())
	for range 3 {
		e2.Reconcile(t.Context())
	}
	if m, _ := e2.Get(t.Context(), "m000"); m.State != record.Speculative {
		t.Fatalf("while its host is dark: %s", m.State)
	}
	if _, ok := be.VM("m000"); !ok {
		t.Fatal("the VM went while its host was dark")
	}
	be.SetZoneDown("zone-a", false)
	e2.Reconcile(t.Context())
	checkResumed(t, e2, be, "m000", ack.OperationID)
}

// TestDeleteIntentUnderIdleRecord: a record with intact state that says
// IDLE (restored from a backup older than the host, say) while its domain
// carries a Delete it never issued ends FAILED with the cause, and its
// stopped domain is not started.
func TestDeleteIntentUnderIdleRecord(t *testing.T) {
	t.Parallel()
	be := fake.New(fake.Options{})
	e := newStreamEngine(t, be, 2)
	startListed(e, context.Background())
	if _, err := e.Create(t.Context(), record.CreateRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m000 IDLE", func() bool { m, _ := e.Get(t.Context(), "m000"); return m.State == record.Idle })
	vm, _ := be.VM("m000")
	vm.DeleteOperationID = "op-from-the-future"
	vm.Running, vm.Run = false, backend.RunState{State: backend.RunShutoff, Reason: "destroyed"}
	be.Restore(vm)
	starts := be.Calls(fake.OpStart)

	e.Reconcile(t.Context())
	e.Reconcile(t.Context())
	m, _ := e.Get(t.Context(), "m000")
	if m.State != record.Failed || !strings.Contains(m.LastError, "op-from-the-future") {
		t.Fatalf("machine: %s %q, want FAILED naming the Delete", m.State, m.LastError)
	}
	if be.Calls(fake.OpStart) != starts {
		t.Fatal("the domain of a begun Delete was started")
	}
	if _, err := e.Release(t.Context(), "m000"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "released", func() bool { m, _ := e.Get(t.Context(), "m000"); return m.State == record.Speculative })
	if _, ok := be.VM("m000"); ok {
		t.Fatal("Release left the domain")
	}
}
