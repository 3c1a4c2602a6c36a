package serial

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// blocked reports whether done stays open for a short while: the call it
// signals is waiting.
func blocked(done <-chan struct{}) bool {
	select {
	case <-done:
		return false
	case <-time.After(50 * time.Millisecond):
		return true
	}
}

// Keyed: one holder per key, other keys free, and no entry left behind.
func TestKeyedSerialisesPerKey(t *testing.T) {
	t.Parallel()
	var k Keyed
	unlockA := k.Lock("a")
	k.Lock("b")() // another key is not held up

	got := make(chan struct{})
	go func() {
		k.Lock("a")()
		close(got)
	}()
	if !blocked(got) {
		t.Fatal("a second Lock of a held key did not wait")
	}
	unlockA()
	<-got
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.m) != 0 {
		t.Errorf("%d keys left in the map after every unlock", len(k.m))
	}
}

// CallGate: a second call on a machine waits for the first to leave; a
// caller that gives up learns which call still runs.
func TestCallGateOneCallPerMachine(t *testing.T) {
	t.Parallel()
	var g CallGate
	leave, _, err := g.Enter(t.Context(), "m", record.OpCreate)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := g.Enter(t.Context(), "n", record.OpDelete)
	if err != nil {
		t.Fatal("another machine waited:", err)
	}
	other()

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, running, err := g.Enter(ctx, "m", record.OpRelease); !errors.Is(err, context.DeadlineExceeded) || running != record.OpCreate {
		t.Errorf("Enter while a Create runs = (%q, %v), want (create, deadline exceeded)", running, err)
	}

	entered := make(chan struct{})
	go func() {
		l, _, err := g.Enter(t.Context(), "m", record.OpRelease)
		if err == nil {
			l()
		}
		close(entered)
	}()
	if !blocked(entered) {
		t.Fatal("a second call on the machine did not wait")
	}
	leave()
	<-entered
}

func TestRunSetWaitsForEveryRun(t *testing.T) {
	t.Parallel()
	var r RunSet
	if err := r.Wait(t.Context()); err != nil {
		t.Fatal("Wait on an empty set:", err)
	}
	r.Add("op1")
	r.Add("op1") // a retry of the same operation
	r.Add("op2")
	if !r.Has("op1") || r.Len() != 2 {
		t.Fatalf("Has(op1) %v, Len %d; want true, 2", r.Has("op1"), r.Len())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := r.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with live runs = %v", err)
	}
	done := make(chan struct{})
	go func() {
		if err := r.Wait(t.Context()); err != nil {
			t.Error(err)
		}
		close(done)
	}()
	r.Done("op1")
	if !r.Has("op1") {
		t.Error("op1 ended after one of its two runs")
	}
	r.Done("op2")
	r.Done("op1")
	<-done
	if r.Has("op1") || r.Len() != 0 {
		t.Errorf("after every Done: Has(op1) %v, Len %d", r.Has("op1"), r.Len())
	}
	r.Add("op3") // the set is reusable after going idle
	if r.Len() != 1 {
		t.Error("Add after idle lost")
	}
	r.Done("op3")
}

// MoveHolds: one migration per machine; while it runs every transition is
// refused as Unavailable and reconcile passes the machine by, and for a
// while after it ended too, for listings taken before the end.
func TestMoveHolds(t *testing.T) {
	t.Parallel()
	var h MoveHolds
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if !h.Take("m", "", t0) || h.Take("m", "hv2", t0) {
		t.Fatal("a second migration of a migrating machine was taken")
	}
	if got := h.Target("m"); got != "(placement)" {
		t.Errorf("Target with no host asked = %q", got)
	}
	if err := h.Refusal("m"); err == nil || err.Code != record.CodeUnavailable {
		t.Errorf("Refusal while migrating = %v, want Unavailable", err)
	}
	if h.Refusal("other") != nil || h.Skip("other", t0) {
		t.Error("a machine that is not migrating is held")
	}
	if !h.Skip("m", t0.Add(time.Hour)) {
		t.Error("reconcile does not pass a migrating machine by")
	}

	end := t0.Add(time.Minute)
	h.End("m", end)
	if h.Refusal("m") != nil {
		t.Error("a finished migration still refuses transitions")
	}
	if !h.Skip("m", end.Add(-time.Second)) {
		t.Error("a listing taken before the migration ended is trusted")
	}
	if h.Skip("m", end.Add(time.Second)) {
		t.Error("a listing taken after the end is not trusted")
	}
	if !h.Take("m", "hv3", end) || h.Target("m") != "hv3" {
		t.Error("a machine whose migration ended cannot migrate again")
	}
	h.End("m", end)
	h.Take("n", "", end.Add(keepEnded+time.Second)) // prunes ended holds past keepEnded
	if h.Skip("m", time.Time{}) {
		t.Error("an ended hold outlived keepEnded")
	}
}
