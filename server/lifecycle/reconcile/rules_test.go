package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func obs(id, host string, state, reason string) backend.Observed {
	return backend.Observed{MachineID: id, Placement: backend.Placement{Host: host, Domain: "bf-" + id},
		Run: backend.RunState{State: state, Reason: reason}}
}

// The history says how many restarts ran since the last good boot: the
// trailing run of "restarted" and "restart failed" entries, ended by any
// other entry; the newest entry gives the time and error, and a give-up
// counts only as the very last entry.
func TestRestartTrailOf(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rc := func(outcome, err string, at time.Time) record.Transition {
		return record.Transition{Kind: record.OpReconcile, Outcome: outcome, LastError: err, Ended: at}
	}
	h := []record.Transition{
		{Kind: record.OpCreate, Outcome: "succeeded"},
		rc(OutcomeRestarted, "", t0),
		rc(OutcomeBootConfirmed, "", t0.Add(time.Hour)), // a good boot ends the count
		rc(OutcomeRestarted, "", t0.Add(2*time.Hour)),
		rc(OutcomeRestartFailed, "host refused", t0.Add(3*time.Hour)),
	}
	tr := restartTrailOf(h)
	if tr.tries != 2 || !tr.last.Equal(t0.Add(3*time.Hour)) || tr.lastErr != "host refused" || tr.gaveUp != "" {
		t.Errorf("trail = %+v, want 2 tries, the last failed at +3h", tr)
	}
	gaveUp := restartTrailOf(append(slices.Clone(h), rc(OutcomeGaveUp, "gave up after 2", t0.Add(4*time.Hour))))
	if gaveUp.gaveUp != "gave up after 2" || gaveUp.tries != 2 {
		t.Errorf("given up: %+v", gaveUp)
	}
	if tr := restartTrailOf(append(slices.Clone(h), record.Transition{Kind: record.OpConfigure})); tr.tries != 0 {
		t.Errorf("a transition after the restarts leaves %d tries", tr.tries)
	}
	if tr := restartTrailOf(nil); tr != (restartTrail{}) {
		t.Errorf("empty history: %+v", tr)
	}
}

// The run note keeps the time a domain was first seen down while the
// state lasts, and only our own note is taken for one.
func TestRunNote(t *testing.T) {
	t.Parallel()
	first := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	m := &record.Machine{Domain: "bf-m"}
	off := backend.RunState{State: backend.RunShutoff, Reason: "crashed"}
	m.LastError = runNote(m, off, first) + "; not restarted: whatever"
	if !isRunNote(m) {
		t.Fatalf("our note %q is not recognised", m.LastError)
	}
	again := runNote(m, off, first.Add(time.Hour))
	if !strings.HasSuffix(again, first.Format(time.RFC3339)) {
		t.Errorf("the note's time moved: %q", again)
	}
	paused := runNote(m, backend.RunState{State: backend.RunPaused}, first.Add(time.Hour))
	if !strings.HasSuffix(paused, first.Add(time.Hour).Format(time.RFC3339)) {
		t.Errorf("a new state kept the old time: %q", paused)
	}
	for _, other := range []record.Machine{
		{Domain: "bf-m", LastError: "configure: agent not answering"},
		{Domain: "bf-other", LastError: m.LastError},
		{LastError: m.LastError},
	} {
		if isRunNote(&other) {
			t.Errorf("%q on domain %q taken for our note", other.LastError, other.Domain)
		}
	}
}

// A fenced copy on a host declared down is stale only when the record
// proves the machine lives elsewhere or was deleted; an unknown id or a
// record naming this host (or none) keeps it.
func TestStaleFenced(t *testing.T) {
	t.Parallel()
	o := obs("m", "hv1", backend.RunRunning, "")
	for _, c := range []struct {
		m     record.Machine
		known bool
		stale bool
	}{
		{record.Machine{}, false, false},
		{record.Machine{State: record.Speculative, OpKind: record.OpDelete}, true, true},
		{record.Machine{State: record.Idle, HostName: "hv2"}, true, true},
		{record.Machine{State: record.Speculative, HostName: "hv2"}, true, false},
		{record.Machine{State: record.Idle, HostName: "hv1"}, true, false},
		{record.Machine{State: record.Idle}, true, false},
	} {
		why, stale := staleFenced(&c.m, c.known, o)
		if stale != c.stale || why == "" {
			t.Errorf("record %+v (known %v): stale %v (%q), want %v", c.m, c.known, stale, why, c.stale)
		}
	}
}

func TestDeletedAndRelocated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		m    record.Machine
		want bool
	}{
		{record.Machine{State: record.Speculative, OpKind: record.OpDelete}, true},
		{record.Machine{State: record.Speculative, OpKind: record.OpRelease}, true},
		{record.Machine{State: record.Speculative}, false}, // a seed
		{record.Machine{State: record.Idle, OpKind: record.OpDelete}, false},
	} {
		if got := deleted(&c.m); got != c.want {
			t.Errorf("deleted(%v, %q) = %v", c.m.State, c.m.OpKind, got)
		}
	}
	cur := &record.Machine{HostName: "hv1", Domain: "bf-m"}
	for _, c := range []struct {
		o    backend.Observed
		want bool
	}{
		{obs("m", "hv2", backend.RunRunning, ""), true},
		{obs("m", "hv1", backend.RunRunning, ""), false},
		{obs("m", "hv2", backend.RunShutoff, "migrated"), false}, // a stale source does not move the machine
		{obs("m", "", backend.RunRunning, ""), false},
	} {
		if got := relocated(cur, c.o); got != c.want {
			t.Errorf("relocated to %q (%s) = %v", c.o.Placement.Host, c.o.Run.State, got)
		}
	}
	other := obs("m", "hv2", backend.RunRunning, "")
	other.Placement.Domain = "another"
	if relocated(cur, other) {
		t.Error("another domain's name counts as the machine's")
	}
}

// Of several copies of a machine the listing's index keeps the running
// one, and never a migration's stale source over another copy.
func TestByMachinePrefersTheRunningCopy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		copies []backend.Observed
		want   string
	}{
		{[]backend.Observed{obs("m", "a", backend.RunShutoff, ""), obs("m", "b", backend.RunRunning, "")}, "b"},
		{[]backend.Observed{obs("m", "a", backend.RunRunning, ""), obs("m", "b", backend.RunShutoff, "")}, "a"},
		{[]backend.Observed{obs("m", "a", backend.RunShutoff, "migrated"), obs("m", "b", backend.RunPaused, "")}, "b"},
		{[]backend.Observed{obs("m", "a", backend.RunPaused, ""), obs("m", "b", backend.RunShutoff, "migrated")}, "a"},
	} {
		if got := byMachine(c.copies)["m"].Placement.Host; got != c.want {
			t.Errorf("%v: kept %q, want %q", c.copies, got, c.want)
		}
	}
	if got := copiesOf([]backend.Observed{obs("m", "a", "", ""), obs("n", "a", "", ""), obs("m", "b", "", "")}); len(got) != 1 || len(got["m"]) != 2 {
		t.Errorf("copiesOf = %v, want m's two copies only", got)
	}
}

// A machine one of whose copies a migration paused is recovered with all
// its copies; a plain pause is not a migration.
func TestInterrupted(t *testing.T) {
	t.Parallel()
	got := interrupted([]backend.Observed{
		obs("m", "a", backend.RunPaused, "migrating"), obs("m", "b", backend.RunRunning, ""),
		obs("n", "a", backend.RunPaused, "user"),
	})
	if len(got) != 1 || len(got["m"]) != 2 {
		t.Errorf("interrupted = %v, want m with both copies", got)
	}
	for _, c := range []struct {
		res  backend.MigrationRecovery
		want string
	}{{backend.MigrationRecovery{Completed: true}, "completed"}, {backend.MigrationRecovery{Resumed: true}, "resumed"}, {backend.MigrationRecovery{}, "running"}} {
		if got := recoveryOutcome(c.res); got != c.want {
			t.Errorf("recoveryOutcome(%+v) = %q, want %q", c.res, got, c.want)
		}
	}
}

// A spare copy is removed only with the evidence in the listing: the kept
// copy runs, the spare is not bound and not paused.
func TestWhyNotSpare(t *testing.T) {
	t.Parallel()
	up := obs("m", "a", backend.RunRunning, "")
	bound := obs("m", "b", backend.RunShutoff, "")
	bound.ClusterID = "k"
	for _, c := range []struct {
		keep, c backend.Observed
		spare   bool
	}{
		{up, obs("m", "b", backend.RunShutoff, ""), true},
		{obs("m", "a", backend.RunShutoff, ""), obs("m", "b", backend.RunShutoff, ""), false},
		{up, bound, false},
		{up, obs("m", "b", backend.RunPaused, ""), false},
	} {
		if why := whyNotSpare(c.keep, c.c); (why == "") != c.spare {
			t.Errorf("keep %s, copy %s: %q", c.keep.Run, c.c.Run, why)
		}
	}
}

func TestHostUnreachable(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		nil: false,
		fmt.Errorf("hv1: %w", backend.ErrHostUnavailable): true,
		fmt.Errorf("x: %w", backend.ErrTransient):         true,
		context.DeadlineExceeded:                          true,
		errors.New("domain not found"):                    false,
	} {
		if got := hostUnreachable(err); got != want {
			t.Errorf("hostUnreachable(%v) = %v", err, got)
		}
	}
}

// Listed: waiters wake when a zone is listed; the hosts a listing missed
// are named until listed; Wake never blocks.
func TestListedAwaitAndMissing(t *testing.T) {
	t.Parallel()
	l := NewListed()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if l.Await(ctx, "z") {
		t.Fatal("Await returned true before any listing")
	}
	done := make(chan bool)
	go func() { done <- l.AwaitCovers(t.Context(), "z", "b", true) }()
	l.Mark("z", []string{"a"}, []string{"b"})
	if got := l.Missing("z"); !slices.Equal(got, []string{"b"}) {
		t.Errorf("Missing = %v, want [b]", got)
	}
	if !l.Has("z") || !l.WithoutHost("z", "b") || l.WithoutHost("z", "a") {
		t.Error("a listing of a without b: Has, WithoutHost wrong")
	}
	if !l.Covers("z", NoHost) {
		t.Error("a record without a domain waits for more than its zone's first listing")
	}
	select {
	case <-done:
		t.Fatal("a waiter for host b woke before b was listed")
	case <-time.After(20 * time.Millisecond):
	}
	l.Mark("z", []string{"b"}, nil)
	if !<-done {
		t.Error("the waiter for b did not see b listed")
	}
	l.Wake()
	l.Wake() // the second finds the kick pending: it must not block
	<-l.Kick()
	l.Passed()
	l.Passed()
	<-l.First()
}
