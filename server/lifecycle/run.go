package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/arbiter"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// result is what a backend call produced.
type result struct {
	placement backend.Placement
	err       error
	addresses []string // a Configure's guest addresses (see readAddresses)
	// rollback, when set, ends the transition back in its starting state
	// with this as last_error: only a Configure cut by a restart before
	// its bootstrap hook started (resumeconfigure.go).
	rollback string
}

// launch runs an accepted transition in the background. blob is only set
// for Configure and lives only in this goroutine. The run is registered
// before launch returns (the caller holds the machine's lock), so the sweep
// never mistakes a transition that is just starting for one whose run is
// gone.
func (e *Engine) launch(m *record.Machine, blob []byte) {
	// begin set both from one clock reading: this is the exact budget.
	e.launchFor(m, blob, m.OpDeadline.Sub(m.StateSince))
}

// launchFor launches with budget as the timeout its message names.
func (e *Engine) launchFor(m *record.Machine, blob []byte, budget time.Duration) {
	snap := m.Edit()
	e.track(snap.OperationID, func() { e.run(snap, blob, roundBudget(budget)) })
}

// track runs f as the live run of operation op.
func (e *Engine) track(op string, f func()) {
	e.runs.Add(op)
	if !e.goBackground(func() { defer e.runs.Done(op); f() }) {
		e.runs.Done(op)
	}
}

// run executes one transition under its deadline. A timeout ends it FAILED
// at the deadline even if the backend ignores its context; whatever the
// backend returns later is discarded by finish (the operation is no longer
// current), and the machine's next backend call waits for it (callGate).
func (e *Engine) run(m record.Machine, blob []byte, budget time.Duration) {
	ctx, cancel := context.WithDeadline(e.bgCtx, m.OpDeadline)
	defer cancel()
	done := make(chan result, 1)
	started := make(chan struct{})
	waited := make(chan record.OpKind, 1)
	fault := &lastFault{}
	go func() {
		leave, running, err := e.calls.Enter(ctx, m.ID, m.OpKind)
		if err != nil {
			waited <- running
			return
		}
		defer leave()
		close(started)
		done <- e.executeRetrying(ctx, &m, blob, fault)
	}()
	select {
	case r := <-done:
		if e.bgCtx.Err() != nil {
			return // shutting down: the next start resumes it
		}
		e.finish(m, r)
	case <-ctx.Done():
		if e.bgCtx.Err() != nil {
			return
		}
		// enter returns promptly once ctx is done: either the call had
		// begun, or it was still waiting for an earlier one to return.
		var waitingFor record.OpKind
		select {
		case <-started:
		case waitingFor = <-waited:
		}
		e.finish(m, result{err: timedOut(m.OpKind, budget, waitingFor, fault.get())})
	}
}

// timeoutError is a transition that ran out of time; its text is the
// machine's last_error.
type timeoutError struct{ msg string }

func (t *timeoutError) Error() string { return t.msg }

func timedOut(kind record.OpKind, after time.Duration, waitingFor record.OpKind, last error) error {
	msg := fmt.Sprintf("%s timed out after %s", kind, after)
	if waitingFor != "" {
		msg += fmt.Sprintf(" waiting for the earlier %s call on this machine to return", waitingFor)
	}
	if last != nil {
		msg += fmt.Sprintf(" (retrying after transient faults; last error: %v)", last)
	}
	return &timeoutError{msg: msg}
}

// roundBudget keeps timeout messages readable: whole seconds, or whole
// milliseconds for sub-second budgets (tests).
func roundBudget(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

func (e *Engine) execute(ctx context.Context, m *record.Machine, blob []byte, st *attemptState) result {
	pl := m.Placement()
	switch m.OpKind {
	case record.OpCreate:
		return e.create(ctx, m, st)
	case record.OpConfigure:
		start := arbiter.MayStart(m, e.views.Get(m.Zone), m.HostName)
		err := e.be.Configure(ctx, backend.ConfigureSpec{
			MachineID: m.ID, OperationID: m.OperationID, Placement: pl, ClusterID: m.Cluster,
			BootstrapBlob: blob, ShardMetadata: record.CloneMap(m.ShardMetadata), Marks: e.machineMarks(m.ID),
			MayStart: start.Kind == arbiter.Act, WhyNotStart: start.Err(),
		})
		if err != nil {
			return result{err: err}
		}
		return result{addresses: e.readAddresses(ctx, m.ID, pl)}
	case record.OpDrain:
		return result{err: e.be.Drain(ctx, backend.DrainSpec{
			MachineID: m.ID, OperationID: m.OperationID, Placement: pl, ClusterID: m.Cluster,
			Grace: time.Duration(min(m.DrainGrace, maxGraceSeconds)) * time.Second, Marks: e.machineMarks(m.ID),
		})}
	case record.OpDelete, record.OpRelease:
		return result{err: e.be.Delete(ctx, backend.DeleteSpec{
			MachineID: m.ID, OperationID: m.OperationID, Zone: m.Zone, Placement: pl,
		})}
	}
	return result{err: fmt.Errorf("unknown transition %q", m.OpKind)}
}

// resume restarts a transition that was in flight when the process
// stopped. Create, Drain and Delete are idempotent on the backend and run
// again with a fresh deadline. Configure cannot run again, because the
// bootstrap blob is deliberately never stored: a backend that can ask the
// guest what became of it (backend.ConfigureProber) has it rolled back or
// finished (resumeConfigure); otherwise it ends FAILED saying why.
func (e *Engine) resume(id string) {
	m, _ := e.idx.Get(id)
	if m.OpKind == record.OpConfigure && e.can.ConfigureProber != nil {
		op := *m
		e.log.Info("asking the guest what became of a Configure cut by a restart", "machine", id, "op", op.OperationID)
		e.track(op.OperationID, func() { e.resumeConfigure(op) })
		return
	}
	if m.OpKind == record.OpConfigure {
		op := *m
		e.track(op.OperationID, func() {
			msg := "interrupted by a provider restart; the bootstrap blob is never persisted, so it cannot be delivered again"
			if err := e.abandonConfigure(op); err != nil {
				msg += "; cleaning the guest failed too: " + err.Error()
			}
			e.finish(op, result{err: errors.New(msg)})
		})
		return
	}
	// A resumed transition gets a fresh deadline, and its timeout message
	// must name that budget.
	n := m.Edit()
	budget := e.timeout(m.OpKind)
	n.OpDeadline = e.cfg.Now().Add(budget)
	e.log.Info("resuming transition after restart", "machine", id, "op", n.OperationID, "kind", string(n.OpKind))
	e.launchFor(&n, nil, budget)
}

func (e *Engine) timeout(k record.OpKind) time.Duration {
	switch k {
	case record.OpCreate:
		return e.cfg.CreateTimeout
	case record.OpConfigure:
		return e.cfg.ConfigureTimeout
	case record.OpDrain:
		return e.cfg.DrainTimeout
	}
	return e.cfg.DeleteTimeout
}
