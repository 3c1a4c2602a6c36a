package lifecycle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/reconcile"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func withRestarts(backoff time.Duration, tries int) func(*Config) {
	return func(c *Config) { c.RestartBackoff, c.RestartMaxTries = backoff, tries }
}

// crashAgain is a guest that dies at every boot: after each pass that
// started it, it is found crashed by the next.
func (r *runRig) crashAgain(id string) { r.be.SetRunState(id, crashed) }

// TestRestartBacksOff: the first restart is at once, the next ones wait
// B, 2B, 4B after the previous; a pass during the wait starts nothing and
// says in last_error when the next try is due.
func TestRestartBacksOff(t *testing.T) {
	t.Parallel()
	const b = 10 * time.Second
	r := newRunRig(t, 2, withRestarts(b, 10))
	r.toIdle("m000")
	r.crashAgain("m000")
	r.reconcile()
	if n := r.be.Calls(fake.OpStart); n != 1 {
		t.Fatalf("first restart not at once: %d starts", n)
	}
	for try, wait := range []time.Duration{b, 2 * b, 4 * b} {
		r.crashAgain("m000")
		r.advance(wait - 2*time.Second) // reconcile adds 1s: still inside the wait
		r.reconcile()
		m := r.get("m000")
		due := fmt.Sprintf("next restart (try %d of 10) at ", try+2)
		if r.be.Calls(fake.OpStart) != try+1 || !strings.Contains(m.LastError, "and it stopped again; "+due) {
			t.Fatalf("try %d: %d starts during the wait, last_error %q", try+2, r.be.Calls(fake.OpStart), m.LastError)
		}
		r.reconcile() // the wait is over
		if n := r.be.Calls(fake.OpStart); n != try+2 {
			t.Fatalf("try %d: %d starts after the wait", try+2, n)
		}
	}
}

// TestRestartGivesUp: after RestartMaxTries restarts the domain stopped
// again each time, reconcile stops: last_error says so, one WARN, a
// history entry, the metric; later passes start nothing and write nothing.
func TestRestartGivesUp(t *testing.T) {
	t.Parallel()
	const b = time.Second
	r := newRunRig(t, 2, withRestarts(b, 3))
	r.toIdle("m000")
	for range 3 {
		r.crashAgain("m000")
		r.advance(time.Minute)
		r.reconcile()
	}
	r.crashAgain("m000")
	r.advance(time.Minute)
	rep := r.reconcile()
	m := r.get("m000")
	const msg = "reconcile gave up restarting it after 3 tries (last stop: shut off (crashed))"
	last := m.History[len(m.History)-1]
	if r.be.Calls(fake.OpStart) != 3 || m.State != record.Idle || rep.NotRunning != 1 ||
		!strings.HasPrefix(m.LastError, "domain bf-m000 is shut off (crashed) since ") || !strings.HasSuffix(m.LastError, "; "+msg) ||
		last.Outcome != reconcile.OutcomeGaveUp || last.LastError != msg {
		t.Fatalf("%d starts, machine %s %q, last transition %+v", r.be.Calls(fake.OpStart), m.State, m.LastError, last)
	}
	if warns := r.logs.records("reconcile: gave up restarting a domain that does not stay up"); len(warns) != 1 ||
		warns[0]["level"] != "WARN" || warns[0]["machine"] != "m000" {
		t.Fatalf("log %v", warns)
	}
	if z := r.obs.gaveUpZones(); len(z) != 1 || z[0] != "zone-a" {
		t.Fatalf("metric %v", z)
	}
	for range 3 {
		r.advance(time.Hour)
		r.reconcile()
	}
	if again := r.get("m000"); r.be.Calls(fake.OpStart) != 3 || again.Revision != m.Revision || len(r.obs.gaveUpZones()) != 1 {
		t.Fatalf("after giving up: %d starts, %q", r.be.Calls(fake.OpStart), again.LastError)
	}
}

// TestRestartCountResetsOnBoot: a domain seen running the boot hold (10
// backoff periods) after its restart has booted: the count starts afresh (the next crash is
// restarted at once), and a give-up is lifted too. Seen running sooner is
// not a boot.
func TestRestartCountResetsOnBoot(t *testing.T) {
	t.Parallel()
	const b = 10 * time.Second
	r := newRunRig(t, 2, withRestarts(b, 2))
	r.toIdle("m000")
	r.crashAgain("m000")
	r.reconcile() // try 1, the domain runs
	r.reconcile() // seen running 1s later: not yet a boot
	r.crashAgain("m000")
	r.reconcile()
	if n := r.be.Calls(fake.OpStart); n != 1 {
		t.Fatalf("a crash within the backoff restarted at once: %d starts", n)
	}
	r.advance(b)
	r.reconcile() // try 2
	r.advance(b)
	r.reconcile() // running b after it: not yet a boot (it must hold 10 b)
	if m := r.get("m000"); m.History[len(m.History)-1].Outcome == reconcile.OutcomeBootConfirmed {
		t.Fatal("a boot confirmed after one backoff period: a guest dying a few seconds into each boot would never be given up")
	}
	r.advance(9 * b)
	r.reconcile() // running 10 b after it: booted
	m := r.get("m000")
	if last := m.History[len(m.History)-1]; last.Outcome != reconcile.OutcomeBootConfirmed || m.LastError != "" {
		t.Fatalf("last transition %+v, last_error %q", last, m.LastError)
	}
	r.crashAgain("m000")
	r.reconcile()
	if n := r.be.Calls(fake.OpStart); n != 3 {
		t.Fatalf("after a boot the count did not start afresh: %d starts", n)
	}
	// Give up (2 tries), then an operator starts it and it stays up.
	r.crashAgain("m000")
	r.advance(b)
	r.reconcile()
	r.crashAgain("m000")
	r.advance(time.Minute)
	r.reconcile()
	if !strings.Contains(r.get("m000").LastError, "gave up") {
		t.Fatalf("no give-up: %q", r.get("m000").LastError)
	}
	r.be.SetRunState("m000", backend.RunState{State: backend.RunRunning, Reason: "booted"})
	r.advance(10 * b)
	r.reconcile()
	r.crashAgain("m000")
	r.reconcile()
	if n := r.be.Calls(fake.OpStart); n != 5 {
		t.Fatalf("a boot after giving up did not lift it: %d starts", n)
	}
}

// TestRestartTransientErrorIsNoTry: a Start that never reached the guest
// (host unreachable) costs no try and no backoff.
func TestRestartTransientErrorIsNoTry(t *testing.T) {
	t.Parallel()
	r := newRunRig(t, 2, withRestarts(time.Hour, 1))
	r.toIdle("m000")
	r.crashAgain("m000")
	r.be.SetFailure(fake.OpStart, "m000", fmt.Errorf("connection reset: %w", backend.ErrTransient))
	r.reconcile()
	r.reconcile()
	r.be.SetFailure(fake.OpStart, "m000", nil)
	r.reconcile()
	m := r.get("m000")
	if r.be.Calls(fake.OpStart) != 3 || m.LastError != "" {
		t.Fatalf("%d starts, last_error %q", r.be.Calls(fake.OpStart), m.LastError)
	}
	for _, h := range m.History {
		if h.Outcome == reconcile.OutcomeRestartFailed {
			t.Fatalf("a transient failure was counted: %+v", h)
		}
	}
}

// TestRestartDisabled: with restarts off, a stopped IDLE domain is only
// reported.
func TestRestartDisabled(t *testing.T) {
	t.Parallel()
	r := newRunRig(t, 2, func(c *Config) { c.RestartDisabled = true })
	r.toIdle("m000")
	r.crashAgain("m000")
	rep := r.reconcile()
	if m := r.get("m000"); r.be.Calls(fake.OpStart) != 0 || rep.NotRunning != 1 ||
		!strings.HasSuffix(m.LastError, "; not restarted: restarts are disabled") {
		t.Fatalf("%d starts, report %+v, last_error %q", r.be.Calls(fake.OpStart), rep, m.LastError)
	}
}
