package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/internal/backoff"
)

// errStale says an outcome was not recorded because its operation is no
// longer the machine's current transition (nothing to retry).
var errStale = errors.New("operation no longer current")

// finish records a transition's outcome. A failed commit is retried with
// backoff for up to CommitRetry, each attempt taking the machine's lock only
// for itself so Get and retried RPCs stay fast meanwhile; then the outcome
// is parked and the sweep keeps trying it. The outcome itself is never
// replaced by FAILED because the store was down: the VM may be fine. On
// shutdown the retry stops and the record stays transitional, to be resumed
// by the next start.
func (e *Engine) finish(op Machine, r result) {
	delay := backoff.New(50*time.Millisecond, 5*time.Second)
	giveUp := time.Now().Add(e.cfg.CommitRetry)
	for attempt := 1; ; attempt++ {
		err := e.finishOnce(op, r)
		if err == nil || errors.Is(err, errStale) {
			return
		}
		if time.Now().After(giveUp) {
			e.park(op, r)
			e.log.Warn("cannot record transition outcome; left to the sweep", "machine", op.ID,
				"op", op.OperationID, "attempts", attempt, "err", err)
			return
		}
		if attempt == 1 {
			e.log.Warn("cannot record transition outcome; retrying", "machine", op.ID, "op", op.OperationID, "err", err)
		}
		if delay.Wait(e.bgCtx) != nil {
			return
		}
	}
}

// finishOnce makes one attempt at recording op's outcome.
func (e *Engine) finishOnce(op Machine, r result) error {
	unlock := e.locks.Lock(op.ID)
	defer unlock()
	cur, ok := e.idx.Get(op.ID)
	if !ok || cur.OperationID != op.OperationID || !cur.State.Transitional() {
		e.log.Info("discarding late completion", "machine", op.ID, "op", op.OperationID)
		return errStale
	}
	return e.record(cur, r)
}

// record commits the outcome r of cur's transition. The caller holds the
// machine's lock and has checked that cur is that transition's record.
func (e *Engine) record(cur *Machine, r result) error {
	now := e.cfg.Now()
	n := cur.Edit()
	outcome := "succeeded"
	if r.err != nil {
		outcome = "failed"
		var te *timeoutError
		if errors.As(r.err, &te) {
			outcome = "timed_out"
		}
		n.State = Failed
		n.LastError = lastError(cur.OpKind, r.err)
	} else {
		applySuccess(&n, r.placement, e.cfg.Provider)
	}
	n.StateSince = now
	n.OpDeadline = time.Time{}
	if h := n.LastTransition(); h != nil {
		h.Ended, h.Outcome, h.To, h.LastError = now, outcome, n.State, n.LastError
		if r.err == nil && cur.OpKind == OpCreate && r.placement.Why != "" {
			h.Note = r.placement.Why // the host chosen and why, kept with the machine
		}
		if r.err == nil && cur.OpKind == OpConfigure && len(r.addresses) > 0 {
			h.Note = noteAddresses(r.addresses)
		}
	}
	if err := e.commit(context.Background(), n.ID, "", nil, &n); err != nil {
		return err
	}
	attrs := []any{"machine", n.ID, "op", n.OperationID, "kind", string(n.OpKind), "outcome", outcome, "state", n.State.String()}
	switch {
	case r.err != nil:
		if errors.Is(r.err, backend.ErrNoCapacity) {
			attrs = append(attrs, "zone", n.Zone, "vcpu", n.VCPU, "memory_mib", n.MemoryMiB)
		}
		e.log.Warn("transition finished", append(attrs, "err", n.LastError)...)
	case cur.OpKind == OpCreate && r.placement.Why != "":
		e.log.Info("transition finished", append(attrs, "host", r.placement.Host, "placement", r.placement.Why)...)
	default:
		e.log.Info("transition finished", attrs...)
	}
	if e.cfg.Observer != nil && len(n.History) > 0 {
		h := n.History[len(n.History)-1]
		e.cfg.Observer.TransitionFinished(n.OpKind, n.Zone, outcome, h.Ended.Sub(h.Started))
	}
	return nil
}

// parkedOutcome is an outcome whose commit gave up, waiting for the sweep.
type parkedOutcome struct {
	op Machine
	r  result
}

func (e *Engine) park(op Machine, r result) {
	e.parkMu.Lock()
	defer e.parkMu.Unlock()
	if e.parked == nil {
		e.parked = make(map[string]parkedOutcome)
	}
	e.parked[op.OperationID] = parkedOutcome{op: op, r: r}
}

func (e *Engine) isParked(op string) bool {
	e.parkMu.Lock()
	defer e.parkMu.Unlock()
	_, ok := e.parked[op]
	return ok
}

func (e *Engine) parkedCount() int {
	e.parkMu.Lock()
	defer e.parkMu.Unlock()
	return len(e.parked)
}

func applySuccess(n *Machine, p backend.Placement, provider string) {
	switch n.OpKind {
	case OpCreate:
		n.State = Idle
		if p.Zone == "" {
			p.Zone = n.Zone
		}
		n.Domain, n.HostName = p.Domain, p.Host
		n.Host = HostRef{Provider: provider, Ref: p.Ref()}
	case OpConfigure:
		n.State = Configured
	case OpDrain:
		n.State = Idle
		n.Cluster, n.ShardMetadata, n.DrainGrace = "", nil, 0
	case OpDelete, OpRelease:
		n.State = Speculative
		n.Host, n.Domain, n.HostName, n.Cluster, n.ShardMetadata = HostRef{}, "", "", "", nil
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
