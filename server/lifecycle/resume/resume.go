package resume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/internal/backoff"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// AbandonTimeout bounds the cleanup of a Configure cut by a restart: the
// wait for the machine's call gate and the backend's guest cleanup.
const AbandonTimeout = time.Minute

// LateAbandonTimeout bounds the cleanup after a cut Configure whose guest
// could not tell within --configure-timeout: the FAILED it precedes is
// already due, and a guest that did not answer all along most likely will
// not now (the next Configure tidies first anyway).
const LateAbandonTimeout = 15 * time.Second

// Engine is what resuming needs of the lifecycle engine.
type Engine interface {
	// EnterCall waits, under ctx, for the machine's backend call gate;
	// leave must be called once the calls returned.
	EnterCall(ctx context.Context, id string, kind record.OpKind) (leave func(), running record.OpKind, err error)
	// Marks returns the machine's fence marks, recorded with the binding.
	Marks(id string) map[string]backend.FenceMark
	// Addresses reads the guest's addresses after a Configure that ended
	// ok (nil when unknown).
	Addresses(ctx context.Context, id string, pl backend.Placement) []string
	// Abandon removes what the Configure left in the guest
	// (backend.Abandoner) within the bound, for a caller that holds the
	// machine's call gate; nil when there is nothing to do.
	Abandon(m record.Machine, within time.Duration) error
}

// Config is what a resume needs besides the engine.
type Config struct {
	Prober  backend.ConfigureProber
	Timeout time.Duration // --configure-timeout: the whole resume's bound
	// Retry returns the backoff between two questions to the guest.
	Retry func() *backoff.Backoff
	Log   *slog.Logger
}

// Outcome is how the cut Configure ends: Rollback set, IDLE with it as
// last_error; Err set, FAILED with it (TimedOut: the bound ran out, and
// Err's text is the whole last_error); neither, CONFIGURED.
type Outcome struct {
	Rollback  string
	Err       error
	TimedOut  bool
	Addresses []string
}

// Configure decides the end of the cut Configure m (its record, with the
// cut operation's id, cluster and shard metadata) within a fresh
// cfg.Timeout and through the machine's call gate. ctx is the engine's
// background context: when it ends, the Outcome is not to be recorded
// (the next start asks again).
func Configure(bg context.Context, eng Engine, cfg Config, m record.Machine) Outcome {
	budget := round(cfg.Timeout)
	ctx, cancel := context.WithTimeout(bg, cfg.Timeout)
	defer cancel()
	leave, running, err := eng.EnterCall(ctx, m.ID, record.OpConfigure)
	if err != nil {
		return timedOut(fmt.Sprintf("configure interrupted by a provider restart, and the machine's earlier %s call did not return within --configure-timeout (%s)",
			running, budget))
	}
	defer leave()
	r := run{bg: bg, eng: eng, cfg: cfg, m: m, budget: budget, spec: backend.ConfigureSpec{MachineID: m.ID, OperationID: m.OperationID,
		Placement: m.Placement(), ClusterID: m.Cluster, ShardMetadata: record.CloneMap(m.ShardMetadata), Marks: eng.Marks(m.ID)}}
	o := r.decide(ctx)
	if o.Err != nil || o.Rollback != "" {
		o = r.abandon(o)
	}
	return o
}

// run is one resume's state.
type run struct {
	bg     context.Context // the engine's: a shutdown ends the cleanup too
	eng    Engine
	cfg    Config
	m      record.Machine
	spec   backend.ConfigureSpec
	budget time.Duration
}

func timedOut(msg string) Outcome { return Outcome{Err: errors.New(msg), TimedOut: true} }

func failed(format string, a ...any) Outcome { return Outcome{Err: fmt.Errorf(format, a...)} }

// decide asks the guest until it can tell, and returns the Configure's
// end: a rollback, a success (the Configure finished) or a failure with
// its cause. It runs with the call gate held.
func (r *run) decide(ctx context.Context) Outcome {
	delay := r.cfg.Retry()
	var last error
	for {
		tr, err := r.cfg.Prober.ProbeConfigure(ctx, r.spec)
		switch {
		case errors.Is(err, backend.ErrNotFound):
			return failed("interrupted by a provider restart, and its domain is gone, so nothing can show whether its bootstrap hook ran: %w", err)
		case errors.Is(err, backend.ErrHostDown):
			// Off or fenced for sure: the guest is gone, no answer will come.
			return failed("interrupted by a provider restart, and its host is declared down, so nothing can show whether its bootstrap hook ran: %w", err)
		case err != nil:
			last = err
		case tr.Hook == backend.HookRunning:
			last = errors.New("its bootstrap hook still runs in the guest")
		case tr.Hook == backend.HookNeverStarted:
			return Outcome{Rollback: "configure rolled back to IDLE: cut by a provider restart before its bootstrap hook started; the cluster binding is cleared"}
		case tr.Hook == backend.HookSucceeded:
			return r.finish(ctx)
		case tr.Hook == backend.HookFailed:
			return failed("interrupted by a provider restart; its bootstrap hook had exited with status %d", tr.ExitCode)
		default:
			return failed("interrupted by a provider restart; its bootstrap hook %s, so nobody can tell whether the node joined its cluster", tr.Hook)
		}
		r.cfg.Log.Warn("the guest cannot tell yet what became of a Configure cut by a restart; asking again until --configure-timeout",
			"machine", r.m.ID, "op", r.m.OperationID, "err", last)
		if delay.Wait(ctx) != nil {
			return timedOut(fmt.Sprintf("configure interrupted by a provider restart, and the guest could not tell within --configure-timeout (%s) whether its bootstrap hook ran: %v",
				r.budget, last))
		}
	}
}

// finish ends a cut Configure whose bootstrap hook finished ok: the
// backend waits for the ready hook and records the binding, run again
// after a transient fault within the deadline.
func (r *run) finish(ctx context.Context) Outcome {
	delay := r.cfg.Retry()
	for {
		err := r.cfg.Prober.FinishConfigure(ctx, r.spec)
		if err == nil {
			r.cfg.Log.Info("finished a Configure cut by a restart: its bootstrap hook had finished ok", "machine", r.m.ID, "op", r.m.OperationID)
			return Outcome{Addresses: r.eng.Addresses(ctx, r.m.ID, r.spec.Placement)}
		}
		if !backend.IsTransient(err) || ctx.Err() != nil || delay.Wait(ctx) != nil {
			if ctx.Err() != nil {
				return timedOut(fmt.Sprintf("configure interrupted by a provider restart after its bootstrap hook finished ok, and finishing it did not end within --configure-timeout (%s): %v",
					r.budget, err))
			}
			return failed("interrupted by a provider restart after its bootstrap hook finished ok; finishing it failed: %w", err)
		}
	}
}

// abandon removes what the cut Configure left in the guest before o (a
// rollback or a failure) is recorded. A rollback needs the guest clean
// and the hook still never started afterwards (the old provider's last
// command may have been starting it); otherwise the machine is FAILED.
// A rollback then clears the Configure's intent from the domain.
func (r *run) abandon(o Outcome) Outcome {
	within := AbandonTimeout
	if o.TimedOut {
		within = LateAbandonTimeout
	}
	err := r.eng.Abandon(r.m, within)
	if o.Rollback == "" {
		if err != nil {
			o.Err = fmt.Errorf("%w; cleaning the guest failed too: %v", o.Err, err)
		}
		return o
	}
	if err != nil {
		return failed("interrupted by a provider restart before its bootstrap hook started, but cleaning the guest failed, so it cannot be rolled back: %w", err)
	}
	ctx, cancel := context.WithTimeout(r.bg, AbandonTimeout)
	defer cancel()
	spec := backend.ConfigureSpec{MachineID: r.m.ID, OperationID: r.m.OperationID, Placement: r.spec.Placement}
	tr, err := r.cfg.Prober.ProbeConfigure(ctx, spec)
	switch {
	case err != nil:
		return failed("interrupted by a provider restart before its bootstrap hook started, but the guest could not confirm it after the cleanup: %w", err)
	case tr.Hook != backend.HookNeverStarted:
		return failed("interrupted by a provider restart; its bootstrap hook started while the Configure was being rolled back (%s), so nobody can tell whether the node joined its cluster", tr.Hook)
	}
	if err := r.cfg.Prober.RollBackConfigure(ctx, spec); err != nil {
		// The machine is IDLE all the same: an intent left behind only
		// makes a provider that loses its state ask the guest again,
		// which answers "never started" again.
		r.cfg.Log.Warn("a Configure rolled back to IDLE left its intent on the domain", "machine", r.m.ID, "op", r.m.OperationID, "err", err)
		o.Rollback += "; clearing its intent from the domain failed: " + err.Error()
	}
	return o
}

// round keeps timeout messages readable: whole seconds, or whole
// milliseconds for sub-second budgets (tests).
func round(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
