package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// runRig is an engine over the fake backend with a clock that moves only
// when told, its JSON log and a RunObserver.
type runRig struct {
	t    *testing.T
	e    *Engine
	be   *fake.Backend
	logs *logBuf
	obs  *runObs
	mu   sync.Mutex
	now  time.Time
}

func newRunRig(t *testing.T, n int, tweak ...func(*Config)) *runRig {
	t.Helper()
	r := &runRig{t: t, be: fake.New(fake.Options{}), logs: &logBuf{}, obs: &runObs{},
		now: time.Now().UTC().Truncate(time.Second)} // real time: run deadlines are contexts on the real clock
	cfg := Config{Provider: "test", Seed: seed(n), Logger: slog.New(slog.NewJSONHandler(r.logs, nil)),
		Observer: r.obs, Now: r.clock}
	for _, tw := range tweak {
		tw(&cfg)
	}
	e, err := New(cfg, newMemStore(), r.be)
	if err != nil {
		t.Fatal(err)
	}
	r.e = e
	startListed(e, context.Background())
	t.Cleanup(e.Close)
	return r
}

func (r *runRig) clock() time.Time { r.mu.Lock(); defer r.mu.Unlock(); return r.now }

// reconcile moves the clock a second (so every record predates the
// listing) and runs one pass.
func (r *runRig) reconcile() ReconcileReport {
	r.mu.Lock()
	r.now = r.now.Add(time.Second)
	r.mu.Unlock()
	return r.e.Reconcile(context.Background())
}

// advance moves the clock by d (a backoff running out).
func (r *runRig) advance(d time.Duration) { r.mu.Lock(); r.now = r.now.Add(d); r.mu.Unlock() }

func (r *runRig) get(id string) record.Machine {
	m, err := r.e.Get(context.Background(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

func (r *runRig) wait(id string, s record.State) record.Machine {
	r.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if m := r.get(id); m.State == s {
			return m
		} else if time.Now().After(deadline) {
			r.t.Fatalf("%s is %s (%q), want %s", id, m.State, m.LastError, s)
		}
	}
}

func (r *runRig) toIdle(id string) {
	r.t.Helper()
	if _, err := r.e.Create(context.Background(), record.CreateRequest{MachineID: id}); err != nil {
		r.t.Fatal(err)
	}
	r.wait(id, record.Idle)
}

func (r *runRig) toConfigured(id string) {
	r.t.Helper()
	r.toIdle(id)
	if _, err := r.e.Configure(context.Background(), record.ConfigureRequest{MachineID: id, ClusterID: "c1"}); err != nil {
		r.t.Fatal(err)
	}
	r.wait(id, record.Configured)
}

type restartEvent struct {
	zone, from string
	ok         bool
}

type runObs struct {
	mu       sync.Mutex
	restarts []restartEvent
	down     map[string]map[string]int
	gaveUp   []string // zones
}

func (o *runObs) RestartGaveUp(zone string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.gaveUp = append(o.gaveUp, zone)
}

func (o *runObs) gaveUpZones() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.gaveUp...)
}

func (o *runObs) TransitionFinished(record.OpKind, string, string, time.Duration) {}
func (o *runObs) DomainRestarted(zone, from string, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.restarts = append(o.restarts, restartEvent{zone, from, ok})
}
func (o *runObs) DomainsNotRunning(byZone map[string]map[string]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = byZone
}
func (o *runObs) snapshot() ([]restartEvent, map[string]map[string]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]restartEvent(nil), o.restarts...), maps.Clone(o.down)
}

var (
	crashed   = backend.RunState{State: backend.RunShutoff, Reason: "crashed"}
	destroyed = backend.RunState{State: backend.RunShutoff, Reason: "destroyed"}
)

// TestStoppedIdleIsRestarted: an IDLE machine whose domain was killed is
// started again by the next reconcile, with one WARN, a history entry and
// the restart counted; it never turns FAILED, and the next pass leaves it.
func TestStoppedIdleIsRestarted(t *testing.T) {
	t.Parallel()
	r := newRunRig(t, 2)
	r.toIdle("m000")
	r.be.SetRunState("m000", crashed)
	rep := r.reconcile()
	if rep.Restarted != 1 || rep.NotRunning != 0 {
		t.Fatalf("report %+v", rep)
	}
	if vm, _ := r.be.VM("m000"); !vm.Running {
		t.Fatal("domain not started again")
	}
	m := r.get("m000")
	last := m.History[len(m.History)-1]
	if m.State != record.Idle || m.LastError != "" || last.Outcome != "restarted" ||
		last.LastError != "domain bf-m000 was shut off (crashed); started again by reconcile" {
		t.Fatalf("machine %+v, last transition %+v", m, last)
	}
	warns := r.logs.records("reconcile: restarted a domain that was not running")
	if len(warns) != 1 || warns[0]["level"] != "WARN" || warns[0]["was"] != "shut off (crashed)" || warns[0]["machine"] != "m000" {
		t.Fatalf("log %v", warns)
	}
	restarts, down := r.obs.snapshot()
	if len(restarts) != 1 || restarts[0] != (restartEvent{"zone-a", backend.RunShutoff, true}) || len(down["zone-a"]) != 0 {
		t.Fatalf("observed %v %v", restarts, down)
	}
	r.reconcile()
	if r.be.Calls(fake.OpStart) != 1 || len(r.logs.records("reconcile: restarted a domain that was not running")) != 1 {
		t.Fatal("a running domain was started again")
	}
}

// TestStoppedConfiguredIsReportedNotRestarted: a CONFIGURED machine whose
// domain was destroyed stays CONFIGURED and is not started; its last_error
// says what and since when, one WARN per change (not per pass), the
// revision moves only on a change, and the gauge counts it until it runs.
func TestStoppedConfiguredIsReportedNotRestarted(t *testing.T) {
	t.Parallel()
	r := newRunRig(t, 2)
	r.toConfigured("m001")
	r.be.SetRunState("m001", destroyed)
	first := r.reconcile()
	m := r.get("m001")
	want := "domain bf-m001 is shut off (destroyed) since " + r.clock().Format("2006-01-02T")
	if m.State != record.Configured || !strings.HasPrefix(m.LastError, want) || !strings.Contains(m.LastError, "BigFleet decides") {
		t.Fatalf("machine %s %q", m.State, m.LastError)
	}
	for range 3 {
		if rep := r.reconcile(); rep.NotRunning != 1 || rep.Restarted != 0 {
			t.Fatalf("report %+v (first %+v)", rep, first)
		}
	}
	if again := r.get("m001"); again.Revision != m.Revision || again.LastError != m.LastError {
		t.Fatalf("unchanged state rewrote the record: %q", again.LastError)
	}
	warns := r.logs.records("reconcile: domain not running")
	if len(warns) != 1 || warns[0]["level"] != "WARN" || warns[0]["machine"] != "m001" || warns[0]["domain"] != "bf-m001" ||
		warns[0]["state"] != "CONFIGURED" || !strings.HasPrefix(warns[0]["err"].(string), want) {
		t.Fatalf("log %v", warns)
	}
	if _, down := r.obs.snapshot(); down["zone-b"][backend.RunShutoff] != 1 || len(down["zone-a"]) != 0 {
		t.Fatalf("gauge %v", down)
	}
	if r.be.Calls(fake.OpStart) != 0 {
		t.Fatal("a CONFIGURED machine's domain was started")
	}
	// A new state is a change: one more WARN, the first-seen time restarts.
	r.be.SetRunState("m001", backend.RunState{State: backend.RunPaused, Reason: "user"})
	r.reconcile()
	if m := r.get("m001"); !strings.HasPrefix(m.LastError, "domain bf-m001 is paused (user) since "+r.clock().Format("2006-01-02T")) ||
		len(r.logs.records("reconcile: domain not running")) != 2 {
		t.Fatalf("changed state: %q", m.LastError)
	}
	// Running again (an operator started it): the note is cleared.
	r.be.SetRunState("m001", backend.RunState{State: backend.RunRunning, Reason: "unpaused"})
	r.reconcile()
	if m := r.get("m001"); m.State != record.Configured || m.LastError != "" {
		t.Fatalf("running again: %s %q", m.State, m.LastError)
	}
	if _, down := r.obs.snapshot(); len(down["zone-b"]) != 0 {
		t.Fatalf("gauge %v", down)
	}
}

// TestDrainOfStoppedDomainFailsAtOnce: BigFleet's Drain of a CONFIGURED
// machine whose domain is down ends at once with the cause, instead of
// waiting for an agent that cannot answer.
func TestDrainOfStoppedDomainFailsAtOnce(t *testing.T) {
	t.Parallel()
	r := newRunRig(t, 2)
	r.toConfigured("m001")
	r.be.SetRunState("m001", crashed)
	r.reconcile()
	start := time.Now()
	if _, err := r.e.Drain(context.Background(), record.DrainRequest{MachineID: "m001", GraceSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	m := r.wait("m001", record.Failed)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("drain took %s", took)
	}
	if m.LastError != "drain failed: fake: domain bf-m001 is shut off (crashed): domain is not running" {
		t.Fatalf("last_error %q", m.LastError)
	}
}

// TestRestartFailureIsReported: an IDLE machine whose domain cannot be
// started stays IDLE with the cause and the next try in last_error (one
// WARN per try, none for a pass that waits out the backoff), the failure
// is counted, and a later try that succeeds clears it.
func TestRestartFailureIsReported(t *testing.T) {
	t.Parallel()
	r := newRunRig(t, 2)
	r.toIdle("m000")
	r.be.SetRunState("m000", destroyed)
	r.be.SetFailure(fake.OpStart, "m000", errors.New("qemu: could not open disk"))
	r.reconcile()
	r.reconcile() // within the backoff: no try, no change
	rev := r.get("m000").Revision
	r.advance(DefaultRestartBackoff)
	r.reconcile()
	m := r.get("m000")
	if m.State != record.Idle || !strings.Contains(m.LastError, "is shut off (destroyed) since") ||
		!strings.Contains(m.LastError, "reconcile could not start it again: qemu: could not open disk; next restart (try 3 of 5) at ") ||
		m.Revision == rev {
		t.Fatalf("machine %s %q", m.State, m.LastError)
	}
	if n := len(r.logs.records("reconcile: domain not running")); n != 2 || r.be.Calls(fake.OpStart) != 2 {
		t.Fatalf("%d WARNs, %d starts", n, r.be.Calls(fake.OpStart))
	}
	r.be.SetFailure(fake.OpStart, "m000", nil)
	r.advance(2 * DefaultRestartBackoff)
	r.reconcile()
	if m := r.get("m000"); m.State != record.Idle || m.LastError != "" {
		t.Fatalf("after a good restart: %s %q", m.State, m.LastError)
	}
	restarts, _ := r.obs.snapshot()
	if len(restarts) != 3 || restarts[0].ok || !restarts[2].ok {
		t.Fatalf("restarts %v", restarts)
	}
}

// TestPausedIdleIsReportedNotStarted: only a shut off or crashed domain is
// started again; a paused one (an operator's or libvirt's doing) is said.
func TestPausedIdleIsReportedNotStarted(t *testing.T) {
	t.Parallel()
	r := newRunRig(t, 2)
	r.toIdle("m000")
	r.be.SetRunState("m000", backend.RunState{State: backend.RunPaused, Reason: "I/O error"})
	if rep := r.reconcile(); rep.NotRunning != 1 || r.be.Calls(fake.OpStart) != 0 {
		t.Fatalf("report %+v, %d starts", rep, r.be.Calls(fake.OpStart))
	}
	if m := r.get("m000"); m.State != record.Idle || !strings.HasPrefix(m.LastError, "domain bf-m000 is paused (I/O error) since") {
		t.Fatalf("machine %s %q", m.State, m.LastError)
	}
}
