package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// result is what a backend call produced.
type result struct {
	placement backend.Placement
	err       error
}

// launch runs an accepted transition in the background. blob is only set
// for Configure and lives only in this goroutine.
func (e *Engine) launch(m *Machine, blob []byte) {
	snap := m.edit()
	e.goBackground(func() { e.run(snap, blob) })
}

// run executes one transition under its deadline. A timeout ends it FAILED
// at the deadline even if the backend ignores its context; whatever the
// backend returns later is discarded by finish (the operation is no longer
// current).
func (e *Engine) run(m Machine, blob []byte) {
	// The budget is measured from here: a transition resumed after a
	// restart gets a fresh deadline, and its timeout message must say so.
	budget := roundBudget(m.OpDeadline.Sub(e.cfg.Now()))
	ctx, cancel := context.WithDeadline(e.bgCtx, m.OpDeadline)
	defer cancel()
	done := make(chan result, 1)
	go func() { done <- e.execute(ctx, &m, blob) }()
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
		e.finish(m, result{err: &timeoutError{kind: m.OpKind, after: budget}})
	}
}

type timeoutError struct {
	kind  OpKind
	after time.Duration
}

// roundBudget keeps timeout messages readable: whole seconds, or whole
// milliseconds for sub-second budgets (tests).
func roundBudget(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

func (t *timeoutError) Error() string {
	return fmt.Sprintf("%s timed out after %s", t.kind, t.after)
}

func (e *Engine) execute(ctx context.Context, m *Machine, blob []byte) result {
	pl := backend.Placement{Zone: m.Zone, Domain: m.Domain}
	switch m.OpKind {
	case OpCreate:
		p, err := e.be.Create(ctx, backend.MachineSpec{
			MachineID: m.ID, OperationID: m.OperationID, Zone: m.Zone,
			InstanceType: m.InstanceType, VCPU: m.VCPU, MemoryMiB: m.MemoryMiB,
		})
		return result{placement: p, err: err}
	case OpConfigure:
		return result{err: e.be.Configure(ctx, backend.ConfigureSpec{
			MachineID: m.ID, OperationID: m.OperationID, Placement: pl, ClusterID: m.Cluster,
			BootstrapBlob: blob, ShardMetadata: cloneMap(m.ShardMetadata),
		})}
	case OpDrain:
		return result{err: e.be.Drain(ctx, backend.DrainSpec{
			MachineID: m.ID, OperationID: m.OperationID, Placement: pl, ClusterID: m.Cluster,
			Grace: time.Duration(min(m.DrainGrace, maxGraceSeconds)) * time.Second,
		})}
	case OpDelete, OpRelease:
		return result{err: e.be.Delete(ctx, backend.DeleteSpec{
			MachineID: m.ID, OperationID: m.OperationID, Zone: m.Zone, Placement: pl,
		})}
	}
	return result{err: fmt.Errorf("unknown transition %q", m.OpKind)}
}

// finish records a transition's outcome, unless the operation is no longer
// the machine's current one (a late completion of a superseded or already
// failed operation is discarded).
func (e *Engine) finish(op Machine, r result) {
	unlock := e.locks.Lock(op.ID)
	defer unlock()
	cur, ok := e.idx.get(op.ID)
	if !ok || cur.OperationID != op.OperationID || !cur.State.transitional() {
		e.log.Info("discarding late completion", "machine", op.ID, "op", op.OperationID)
		return
	}
	now := e.cfg.Now()
	n := cur.edit()
	outcome := "succeeded"
	if r.err != nil {
		outcome = "failed"
		var te *timeoutError
		if errors.As(r.err, &te) {
			outcome = "timed_out"
		}
		n.State = Failed
		n.LastError = lastError(op.OpKind, r.err)
	} else {
		applySuccess(&n, r.placement, e.cfg.Provider)
	}
	n.StateSince = now
	n.OpDeadline = time.Time{}
	if len(n.History) > 0 {
		h := &n.History[len(n.History)-1]
		h.Ended, h.Outcome, h.To, h.LastError = now, outcome, n.State, n.LastError
	}
	if err := e.commit(context.Background(), n.ID, "", nil, &n); err != nil {
		e.log.Error("cannot record transition outcome", "machine", n.ID, "op", n.OperationID, "err", err)
		return
	}
	e.log.Info("transition finished", "machine", n.ID, "op", n.OperationID, "kind", string(op.OpKind),
		"outcome", outcome, "state", n.State.String())
	if e.cfg.Observer != nil && len(n.History) > 0 {
		h := n.History[len(n.History)-1]
		e.cfg.Observer.TransitionFinished(op.OpKind, n.Zone, outcome, h.Ended.Sub(h.Started))
	}
}

func applySuccess(n *Machine, p backend.Placement, provider string) {
	switch n.OpKind {
	case OpCreate:
		n.State = Idle
		if p.Zone == "" {
			p.Zone = n.Zone
		}
		n.Domain = p.Domain
		n.Host = HostRef{Provider: provider, Ref: p.Ref()}
	case OpConfigure:
		n.State = Configured
	case OpDrain:
		n.State = Idle
		n.Cluster, n.ShardMetadata, n.DrainGrace = "", nil, 0
	case OpDelete, OpRelease:
		n.State = Speculative
		n.Host, n.Domain, n.Cluster, n.ShardMetadata = HostRef{}, "", "", nil
	}
}

// lastError is what BigFleet sees in last_error: never empty, and saying
// which transition failed.
func lastError(kind OpKind, err error) string {
	var te *timeoutError
	if errors.As(err, &te) {
		return te.Error()
	}
	msg := err.Error()
	if msg == "" {
		msg = "unknown error"
	}
	return fmt.Sprintf("%s failed: %s", kind, msg)
}

// resume restarts a transition that was in flight when the process
// stopped. Create, Drain and Delete are idempotent on the backend and run
// again with a fresh deadline; Configure cannot, because the bootstrap blob
// is deliberately never stored, so it ends FAILED saying why.
func (e *Engine) resume(id string) {
	m, _ := e.idx.get(id)
	if m.OpKind == OpConfigure {
		e.finish(*m, result{err: errors.New("interrupted by a provider restart; the bootstrap blob is never persisted, so it cannot be delivered again")})
		return
	}
	n := m.edit()
	n.OpDeadline = e.cfg.Now().Add(e.timeout(m.OpKind))
	e.log.Info("resuming transition after restart", "machine", id, "op", n.OperationID, "kind", string(n.OpKind))
	e.launch(&n, nil)
}

func (e *Engine) timeout(k OpKind) time.Duration {
	switch k {
	case OpCreate:
		return e.cfg.CreateTimeout
	case OpConfigure:
		return e.cfg.ConfigureTimeout
	case OpDrain:
		return e.cfg.DrainTimeout
	}
	return e.cfg.DeleteTimeout
}
