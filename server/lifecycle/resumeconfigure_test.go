package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// probingBackend answers ProbeConfigure from a script of answers (the last
// one repeats), records FinishConfigure and AbandonConfigure calls, and
// fails them with finishErr / abandonErr.
type probingBackend struct {
	*testBackend
	mu         sync.Mutex
	answers    []probeAnswer
	probes     []string // op ids asked about
	finished   []backend.ConfigureSpec
	abandoned  int
	finishErr  error
	abandonErr error
	// rolledBack are the operations whose intent RollBackConfigure
	// cleared; rollBackErr fails it.
	rolledBack  []string
	rollBackErr error
}

var _ backend.ConfigureProber = (*probingBackend)(nil)

type probeAnswer struct {
	tr  backend.ConfigureTrace
	err error
}

func (b *probingBackend) ProbeConfigure(_ context.Context, spec backend.ConfigureSpec) (backend.ConfigureTrace, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probes = append(b.probes, spec.OperationID)
	a := b.answers[0]
	if len(b.answers) > 1 {
		b.answers = b.answers[1:]
	}
	return a.tr, a.err
}

func (b *probingBackend) FinishConfigure(_ context.Context, spec backend.ConfigureSpec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.finished = append(b.finished, spec)
	return b.finishErr
}

func (b *probingBackend) RollBackConfigure(_ context.Context, spec backend.ConfigureSpec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rolledBack = append(b.rolledBack, spec.OperationID)
	return b.rollBackErr
}

func (b *probingBackend) AbandonConfigure(context.Context, string, backend.Placement) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.abandoned++
	return b.abandonErr
}

func (b *probingBackend) counts() (probes []string, finished []backend.ConfigureSpec, abandoned int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.probes...), append([]backend.ConfigureSpec(nil), b.finished...), b.abandoned
}

func answer(h backend.HookTrace) probeAnswer { return probeAnswer{tr: backend.ConfigureTrace{Hook: h}} }

// cutProbed leaves m000 CONFIGURING for cluster c (op returned), as a
// provider killed during its Configure would, and restarts the engine on
// that store with pb answering for the guest.
func cutProbed(t *testing.T, pb *probingBackend, tweak ...func(*Config)) (*fixture, string) {
	t.Helper()
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	pb.testBackend = f.be
	f.wrap = pb
	quick := func(c *Config) { c.RetryMin = time.Millisecond }
	f.start(2, append([]func(*Config){quick}, tweak...)...)
	f.toIdle("m000")
	f.be.setDelay(record.OpConfigure, time.Hour)
	ack, err := f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: "c",
		ShardMetadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	f.e.Shutdown(ctx)
	f.be.setDelay(record.OpConfigure, 0)
	f.start(2, append([]func(*Config){quick}, tweak...)...)
	return f, ack.OperationID
}

// A Configure cut before its bootstrap hook started rolls back to IDLE:
// binding cleared, last_error and a history entry saying why, the guest
// cleaned first, and the trace asked about by the cut operation's id.
func TestCutConfigureNeverStartedRollsBack(t *testing.T) {
	pb := &probingBackend{answers: []probeAnswer{answer(backend.HookNeverStarted)}}
	f, op := cutProbed(t, pb)
	m := f.waitState("m000", record.Idle)
	if !strings.Contains(m.LastError, "rolled back to IDLE") || !strings.Contains(m.LastError, "before its bootstrap hook started") {
		t.Errorf("last_error %q", m.LastError)
	}
	if m.Cluster != "" || m.ShardMetadata != nil {
		t.Errorf("binding kept after the rollback: cluster %q metadata %v", m.Cluster, m.ShardMetadata)
	}
	h := m.LastTransition()
	if h == nil || h.OperationID != op || h.Outcome != "rolled_back" || h.To != record.Idle || h.LastError != m.LastError {
		t.Errorf("history %+v", h)
	}
	probes, finished, abandoned := pb.counts()
	if len(probes) != 2 || probes[0] != op || probes[1] != op || len(finished) != 0 || abandoned != 1 {
		t.Errorf("probes %v finished %d abandoned %d: want 2 probes of %s (before and after the cleanup), 1 cleanup", probes, len(finished), abandoned, op)
	}
	if s := f.st.stored("m000"); s.State != record.Idle {
		t.Errorf("stored state %s", s.State)
	}
	pb.mu.Lock()
	rolled := append([]string(nil), pb.rolledBack...)
	pb.mu.Unlock()
	if len(rolled) != 1 || rolled[0] != op {
		t.Errorf("intents cleared %v, want that of %s once", rolled, op)
	}
	// IDLE again: a new Configure is accepted.
	if _, err := f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: "c2"}); err != nil {
		t.Fatal(err)
	}
	f.waitState("m000", record.Configured)
}

// A hook that finished ok: the Configure is finished (ready hook and
// binding, by the backend) and ends CONFIGURED for its cluster.
func TestCutConfigureHookSucceededFinishes(t *testing.T) {
	pb := &probingBackend{answers: []probeAnswer{answer(backend.HookSucceeded)}}
	f, op := cutProbed(t, pb)
	m := f.waitState("m000", record.Configured)
	if m.Cluster != "c" || m.LastError != "" {
		t.Errorf("configured %+v", m)
	}
	_, finished, abandoned := pb.counts()
	if len(finished) != 1 || finished[0].OperationID != op || finished[0].ClusterID != "c" ||
		finished[0].ShardMetadata["k"] != "v" || finished[0].BootstrapBlob != nil || abandoned != 0 {
		t.Errorf("finished %+v abandoned %d", finished, abandoned)
	}
}

// A hook that finished ok but whose finishing fails for real: FAILED with
// that cause, the guest cleaned.
func TestCutConfigureFinishFailureFails(t *testing.T) {
	pb := &probingBackend{answers: []probeAnswer{answer(backend.HookSucceeded)}, finishErr: errors.New("node did not become ready")}
	f, _ := cutProbed(t, pb)
	m := f.waitState("m000", record.Failed)
	if !strings.Contains(m.LastError, "finishing it failed: node did not become ready") {
		t.Errorf("last_error %q", m.LastError)
	}
	if _, _, ab := pb.counts(); ab != 1 {
		t.Errorf("abandoned %d times", ab)
	}
}

// The hook failed, or started and vanished: FAILED naming that cause.
func TestCutConfigureHookFailedOrVanishedFails(t *testing.T) {
	for _, c := range []struct {
		tr   backend.ConfigureTrace
		want string
	}{
		{backend.ConfigureTrace{Hook: backend.HookFailed, ExitCode: 3}, "its bootstrap hook had exited with status 3"},
		{backend.ConfigureTrace{Hook: backend.HookVanished}, "started, then vanished without an exit status, so nobody can tell"},
	} {
		t.Run(c.tr.Hook.String(), func(t *testing.T) {
			pb := &probingBackend{answers: []probeAnswer{{tr: c.tr}}}
			f, _ := cutProbed(t, pb)
			m := f.waitState("m000", record.Failed)
			if !strings.HasPrefix(m.LastError, "configure failed: interrupted by a provider restart") || !strings.Contains(m.LastError, c.want) {
				t.Errorf("last_error %q", m.LastError)
			}
			if m.LastTransition().Outcome != "failed" {
				t.Errorf("history %+v", m.LastTransition())
			}
		})
	}
}

// A guest that cannot be asked yet, then a hook still running, is asked
// again until it tells: here it finished ok, so CONFIGURED.
func TestCutConfigureAsksAgainUntilTheGuestTells(t *testing.T) {
	pb := &probingBackend{answers: []probeAnswer{
		{err: fmt.Errorf("guest agent not responding: %w", backend.ErrTransient)},
		{err: fmt.Errorf("domain is shut off: %w", backend.ErrNotRunning)},
		answer(backend.HookRunning), answer(backend.HookRunning),
		answer(backend.HookSucceeded),
	}}
	f, _ := cutProbed(t, pb)
	f.waitState("m000", record.Configured)
	if probes, _, _ := pb.counts(); len(probes) != 5 {
		t.Errorf("%d probes, want 5", len(probes))
	}
}

// A guest that never tells within --configure-timeout: FAILED at the
// bound, saying what was not learned and the last answer; never stuck.
func TestCutConfigureUnreachableFailsAtTheBound(t *testing.T) {
	pb := &probingBackend{answers: []probeAnswer{{err: errors.New("guest agent not responding")}}}
	f, _ := cutProbed(t, pb, func(c *Config) { c.ConfigureTimeout = 300 * time.Millisecond })
	m := f.waitState("m000", record.Failed)
	if !strings.Contains(m.LastError, "could not tell within --configure-timeout") || !strings.Contains(m.LastError, "guest agent not responding") {
		t.Errorf("last_error %q", m.LastError)
	}
	if m.LastTransition().Outcome != "timed_out" {
		t.Errorf("history %+v", m.LastTransition())
	}
	if _, _, ab := pb.counts(); ab != 1 {
		t.Errorf("abandoned %d times, want 1 (a hook still running must not outlive the FAILED)", ab)
	}
}

// A domain that is gone cannot tell: FAILED at once, not at the bound.
func TestCutConfigureDomainGoneFails(t *testing.T) {
	pb := &probingBackend{answers: []probeAnswer{{err: fmt.Errorf("domain bf-m000: %w", backend.ErrNotFound)}}}
	f, _ := cutProbed(t, pb)
	m := f.waitState("m000", record.Failed)
	if !strings.Contains(m.LastError, "its domain is gone") {
		t.Errorf("last_error %q", m.LastError)
	}
}

// A domain on a host declared down cannot tell either (the host is off
// for sure): FAILED at once naming the declaration, not after
// --configure-timeout of asking (the lab soak saw such a machine held
// CONFIGURING, its stale copy kept through the host's fenced rejoin).
func TestCutConfigureOnAHostDeclaredDownFails(t *testing.T) {
	pb := &probingBackend{answers: []probeAnswer{{err: fmt.Errorf("host z/h1 declared down: PSU: %w", backend.ErrHostDown)}}}
	f, _ := cutProbed(t, pb, func(c *Config) { c.ConfigureTimeout = time.Hour })
	m := f.waitState("m000", record.Failed)
	if !strings.Contains(m.LastError, "its host is declared down") || !strings.Contains(m.LastError, "declared down: PSU") {
		t.Errorf("last_error %q", m.LastError)
	}
	if probes, _, _ := pb.counts(); len(probes) > 2 {
		t.Errorf("asked %d times; a declared-down host is not asked again", len(probes))
	}
}

// A rollback needs the guest cleaned and the hook still not started after
// the cleanup; otherwise FAILED with the cause, never IDLE.
func TestCutConfigureRollbackNeedsACleanGuest(t *testing.T) {
	t.Run("cleanup fails", func(t *testing.T) {
		pb := &probingBackend{answers: []probeAnswer{answer(backend.HookNeverStarted)}, abandonErr: errors.New("agent gone")}
		f, _ := cutProbed(t, pb)
		m := f.waitState("m000", record.Failed)
		if !strings.Contains(m.LastError, "cleaning the guest failed, so it cannot be rolled back: agent gone") {
			t.Errorf("last_error %q", m.LastError)
		}
	})
	t.Run("hook starts meanwhile", func(t *testing.T) {
		pb := &probingBackend{answers: []probeAnswer{answer(backend.HookNeverStarted), answer(backend.HookVanished)}}
		f, _ := cutProbed(t, pb)
		m := f.waitState("m000", record.Failed)
		if !strings.Contains(m.LastError, "started while the Configure was being rolled back") {
			t.Errorf("last_error %q", m.LastError)
		}
	})
}

// A rollback whose intent cannot be cleared from the domain still ends
// IDLE (the intent only makes a later rebuild ask the guest again), and
// last_error says so.
func TestCutConfigureRollbackIntentClearFailureIsSaid(t *testing.T) {
	pb := &probingBackend{answers: []probeAnswer{answer(backend.HookNeverStarted)}, rollBackErr: errors.New("host dropped")}
	f, _ := cutProbed(t, pb)
	m := f.waitState("m000", record.Idle)
	if !strings.Contains(m.LastError, "rolled back to IDLE") || !strings.Contains(m.LastError, "clearing its intent from the domain failed: host dropped") {
		t.Errorf("last_error %q", m.LastError)
	}
}
