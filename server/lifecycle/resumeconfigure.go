package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// A Configure cut by a restart (a SIGKILL, a failover, a graceful stop
// that ran out of time) cannot run again: its blob is never stored. The
// guest keeps a trace of the bootstrap hook keyed by the operation id
// (backend.ConfigureProber), which decides its end:
//
//   - the hook never started: nothing joined the node, the partial blob
//     is removed, and the machine rolls back to IDLE (BigFleet's lifecycle
//     allows Configuring → Idle), last_error saying why;
//   - it finished ok: the Configure is finished as it would have been (the
//     ready hook, then the binding) and ends CONFIGURED;
//   - it failed, or started and left no exit status: FAILED with that
//     cause (nobody can tell whether the node joined);
//   - it still runs, or the guest cannot be asked: asked again until
//     --configure-timeout, then FAILED saying what was not learned.
//
// Every end that is not CONFIGURED first removes what the Configure left
// in the guest (backend.Abandoner), so no hook outlives it.

// resumeConfigure decides and records the end of the cut Configure op,
// within a fresh --configure-timeout and through the machine's call gate.
func (e *Engine) resumeConfigure(op record.Machine) {
	budget := e.cfg.ConfigureTimeout
	ctx, cancel := context.WithTimeout(e.bgCtx, budget)
	defer cancel()
	leave, running, err := e.calls.Enter(ctx, op.ID, record.OpConfigure)
	var r result
	if err != nil {
		r = result{err: &timeoutError{msg: fmt.Sprintf("configure interrupted by a provider restart, and the machine's earlier %s call did not return within --configure-timeout (%s)",
			running, roundBudget(budget))}}
	} else {
		r = e.decideCutConfigure(ctx, &op, roundBudget(budget))
		if r.err != nil || r.rollback != "" {
			r = e.abandonCut(op, r)
		}
		leave()
	}
	if e.bgCtx.Err() != nil {
		return // shutting down: the next start asks again
	}
	e.finish(op, r)
}

// decideCutConfigure asks the guest until it can tell, and returns the
// Configure's end: a rollback, a success (the Configure finished) or a
// failure with its cause. It runs with the call gate held.
func (e *Engine) decideCutConfigure(ctx context.Context, m *record.Machine, budget time.Duration) result {
	pr := e.can.ConfigureProber
	spec := backend.ConfigureSpec{MachineID: m.ID, OperationID: m.OperationID, Placement: m.Placement(),
		ClusterID: m.Cluster, ShardMetadata: record.CloneMap(m.ShardMetadata), Marks: e.machineMarks(m.ID)}
	delay := e.retryDelay()
	var last error
	for {
		tr, err := pr.ProbeConfigure(ctx, spec)
		switch {
		case errors.Is(err, backend.ErrNotFound):
			return result{err: fmt.Errorf("interrupted by a provider restart, and its domain is gone, so nothing can show whether its bootstrap hook ran: %w", err)}
		case errors.Is(err, backend.ErrHostDown):
			// Off or fenced for sure: the guest is gone, no answer will come.
			return result{err: fmt.Errorf("interrupted by a provider restart, and its host is declared down, so nothing can show whether its bootstrap hook ran: %w", err)}
		case err != nil:
			last = err
		case tr.Hook == backend.HookRunning:
			last = errors.New("its bootstrap hook still runs in the guest")
		case tr.Hook == backend.HookNeverStarted:
			return result{rollback: "configure rolled back to IDLE: cut by a provider restart before its bootstrap hook started; the cluster binding is cleared"}
		case tr.Hook == backend.HookSucceeded:
			return e.finishCutConfigure(ctx, m, spec, budget)
		case tr.Hook == backend.HookFailed:
			return result{err: fmt.Errorf("interrupted by a provider restart; its bootstrap hook had exited with status %d", tr.ExitCode)}
		default:
			return result{err: fmt.Errorf("interrupted by a provider restart; its bootstrap hook %s, so nobody can tell whether the node joined its cluster", tr.Hook)}
		}
		e.log.Warn("the guest cannot tell yet what became of a Configure cut by a restart; asking again until --configure-timeout",
			"machine", m.ID, "op", m.OperationID, "err", last)
		if delay.Wait(ctx) != nil {
			return result{err: &timeoutError{msg: fmt.Sprintf("configure interrupted by a provider restart, and the guest could not tell within --configure-timeout (%s) whether its bootstrap hook ran: %v",
				budget, last)}}
		}
	}
}

// finishCutConfigure ends a cut Configure whose bootstrap hook finished
// ok: the backend waits for the ready hook and records the binding, run
// again after a transient fault within the deadline.
func (e *Engine) finishCutConfigure(ctx context.Context, m *record.Machine, spec backend.ConfigureSpec, budget time.Duration) result {
	delay := e.retryDelay()
	for {
		err := e.can.ConfigureProber.FinishConfigure(ctx, spec)
		if err == nil {
			e.log.Info("finished a Configure cut by a restart: its bootstrap hook had finished ok", "machine", m.ID, "op", m.OperationID)
			return result{addresses: e.readAddresses(ctx, m.ID, spec.Placement)}
		}
		if !backend.IsTransient(err) || ctx.Err() != nil || delay.Wait(ctx) != nil {
			if ctx.Err() != nil {
				return result{err: &timeoutError{msg: fmt.Sprintf("configure interrupted by a provider restart after its bootstrap hook finished ok, and finishing it did not end within --configure-timeout (%s): %v",
					budget, err)}}
			}
			return result{err: fmt.Errorf("interrupted by a provider restart after its bootstrap hook finished ok; finishing it failed: %w", err)}
		}
	}
}

// abandonCut removes what the cut Configure left in the guest before r
// (a rollback or a failure) is recorded. A rollback needs the guest clean
// and the hook still never started afterwards (the old provider's last
// command may have been starting it); otherwise the machine is FAILED.
func (e *Engine) abandonCut(op record.Machine, r result) result {
	within := abandonTimeout
	var te *timeoutError
	if errors.As(r.err, &te) {
		within = lateAbandonTimeout
	}
	err := e.abandonGuest(op, within)
	if r.rollback == "" {
		if err != nil {
			r.err = fmt.Errorf("%w; cleaning the guest failed too: %v", r.err, err)
		}
		return r
	}
	if err != nil {
		return result{err: fmt.Errorf("interrupted by a provider restart before its bootstrap hook started, but cleaning the guest failed, so it cannot be rolled back: %w", err)}
	}
	ctx, cancel := context.WithTimeout(e.bgCtx, abandonTimeout)
	defer cancel()
	tr, err := e.can.ConfigureProber.ProbeConfigure(ctx, backend.ConfigureSpec{MachineID: op.ID, OperationID: op.OperationID, Placement: op.Placement()})
	switch {
	case err != nil:
		return result{err: fmt.Errorf("interrupted by a provider restart before its bootstrap hook started, but the guest could not confirm it after the cleanup: %w", err)}
	case tr.Hook != backend.HookNeverStarted:
		return result{err: fmt.Errorf("interrupted by a provider restart; its bootstrap hook started while the Configure was being rolled back (%s), so nobody can tell whether the node joined its cluster", tr.Hook)}
	}
	return r
}
