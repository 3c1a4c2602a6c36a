package lifecycle

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/internal/backoff"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// errStale says an outcome was not recorded because its operation is no
// longer the machine's current transition (nothing to retry).
var errStale = record.ErrStale

// errUnchanged: an edit that needs no change (see update).
var errUnchanged = record.ErrUnchanged

// finish records a transition's outcome. A failed commit is retried with
// backoff for up to CommitRetry, each attempt taking the machine's lock only
// for itself so Get and retried RPCs stay fast meanwhile; then the outcome
// is parked and the sweep keeps trying it. The outcome itself is never
// replaced by FAILED because the store was down: the VM may be fine. On
// shutdown the retry stops and the record stays transitional, to be resumed
// by the next start.
func (e *Engine) finish(op record.Machine, r result) {
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
func (e *Engine) finishOnce(op record.Machine, r result) error {
	err := e.record(op.ID, record.Expect{OperationID: op.OperationID, Holds: func(cur *record.Machine) bool {
		return cur.State.Transitional()
	}}, func(*record.Machine) result { return r })
	if errors.Is(err, errStale) {
		e.log.Info("discarding late completion", "machine", op.ID, "op", op.OperationID)
	}
	return err
}

// record commits the outcome of the transition of machine id's record,
// if it is the one expected (through update); outcome is asked under the
// machine's lock, with the record it ends.
func (e *Engine) record(id string, expect record.Expect, outcome func(cur *record.Machine) result) error {
	var r result
	var verdict string
	n, err := e.update(id, expect, func(cur, n *record.Machine) error {
		r = outcome(cur)
		verdict = e.applyOutcome(cur, n, r)
		return nil
	})
	if err != nil {
		return err
	}
	e.reportOutcome(n, r, verdict)
	return nil
}

// applyOutcome ends next's transition with r and returns the history's
// outcome word.
func (e *Engine) applyOutcome(cur, n *record.Machine, r result) string {
	now := e.cfg.Now()
	outcome := "succeeded"
	switch {
	case r.rollback != "":
		outcome = "rolled_back"
		rollBack(n)
		n.LastError = r.rollback
	case r.err != nil:
		outcome = "failed"
		var te *timeoutError
		if errors.As(r.err, &te) {
			outcome = "timed_out"
		}
		n.State = record.Failed
		n.LastError = lastError(cur.OpKind, r.err)
	default:
		applySuccess(n, r.placement, e.cfg.Provider)
	}
	n.StateSince = now
	n.OpDeadline = time.Time{}
	if h := n.LastTransition(); h != nil {
		h.Ended, h.Outcome, h.To, h.LastError = now, outcome, n.State, n.LastError
		if r.err == nil && cur.OpKind == record.OpCreate && r.placement.Why != "" {
			h.Note = r.placement.Why // the host chosen and why, kept with the machine
		}
		if r.err == nil && cur.OpKind == record.OpConfigure && len(r.addresses) > 0 {
			h.Note = strings.TrimPrefix(h.Note+"; "+record.NoteAddresses(r.addresses), "; ") // after a resume's note
		}
	}
	return outcome
}

// reportOutcome logs and observes the committed end n of a transition.
func (e *Engine) reportOutcome(n *record.Machine, r result, outcome string) {
	attrs := []any{"machine", n.ID, "op", n.OperationID, "kind", string(n.OpKind), "outcome", outcome, "state", n.State.String()}
	switch {
	case r.rollback != "":
		e.log.Warn("transition finished", append(attrs, "err", n.LastError)...)
	case r.err != nil:
		if errors.Is(r.err, backend.ErrNoCapacity) {
			attrs = append(attrs, "zone", n.Zone, "vcpu", n.VCPU, "memory_mib", n.MemoryMiB)
		}
		e.log.Warn("transition finished", append(attrs, "err", n.LastError)...)
	case n.OpKind == record.OpCreate && r.placement.Why != "":
		e.log.Info("transition finished", append(attrs, "host", r.placement.Host, "placement", r.placement.Why)...)
	default:
		e.log.Info("transition finished", attrs...)
	}
	if e.cfg.Observer != nil && len(n.History) > 0 {
		h := n.History[len(n.History)-1]
		e.cfg.Observer.TransitionFinished(n.OpKind, n.Zone, outcome, h.Ended.Sub(h.Started))
	}
}

// parkedOutcome is an outcome whose commit gave up, waiting for the sweep.
type parkedOutcome struct {
	op record.Machine
	r  result
}

func (e *Engine) park(op record.Machine, r result) {
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

// rollBack returns n to where its transition started. Only a Configure
// rolls back (to IDLE, its binding cleared).
func rollBack(n *record.Machine) {
	n.State = record.Idle
	n.Cluster, n.ShardMetadata = "", nil
}

func applySuccess(n *record.Machine, p backend.Placement, provider string) {
	switch n.OpKind {
	case record.OpCreate:
		n.State = record.Idle
		if p.Zone == "" {
			p.Zone = n.Zone
		}
		n.Domain, n.HostName = p.Domain, p.Host
		n.Host = record.HostRef{Provider: provider, Ref: p.Ref()}
	case record.OpConfigure:
		n.State = record.Configured
	case record.OpDrain:
		n.State = record.Idle
		n.Cluster, n.ShardMetadata, n.DrainGrace = "", nil, 0
	case record.OpDelete, record.OpRelease:
		n.State = record.Speculative
		n.Host, n.Domain, n.HostName, n.Cluster, n.ShardMetadata = record.HostRef{}, "", "", "", nil
	}
}

// lastError is what BigFleet sees in last_error: never empty, and saying
// which transition failed.
func lastError(kind record.OpKind, err error) string {
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
