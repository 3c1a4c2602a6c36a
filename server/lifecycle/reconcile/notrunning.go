package reconcile

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/arbiter"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// RunObserver is an Observer that is also told what reconcile found about
// domains that are not running (the metrics implement it).
type RunObserver interface {
	// DomainRestarted: reconcile started an IDLE machine's stopped domain
	// again (ok) or tried and failed; from is the run state it was in.
	DomainRestarted(zone, from string, ok bool)
	// DomainsNotRunning gives, after each pass, every listed zone (even
	// with none) and how many IDLE or CONFIGURED machines there have a
	// domain that is not running, by run state.
	DomainsNotRunning(byZone map[string]map[string]int)
}

// restartTimeout bounds one Start, the wait for the machine's call gate
// included; the pass's calls to other hosts go on meanwhile (pass.go).
const restartTimeout = time.Minute

// checkRun reacts to the run state reconcile observed for one machine of
// ours, whose record is unchanged since the listing. An IDLE machine whose
// domain is shut off or crashed is started again, with backoff and up to
// a number of tries (restartIdle); anything else that is not running (a
// CONFIGURED machine, a paused domain) is reported in the record's
// last_error, once per change, and never made FAILED: a stopped domain
// says the VM is not running, not that it is lost. It returns the run
// state still to count as not running ("" when it runs) and the error of
// a Start the host did not carry out. sick: the host failed an earlier
// call of this pass, so no Start is tried now.
func (r *Reconciler) checkRun(ctx context.Context, o backend.Observed, listedAt time.Time, sick bool, v *arbiter.View) (down string, restarted bool, err error) {
	cur, ok := r.eng.Get(o.MachineID)
	if !ok || (cur.State != record.Idle && cur.State != record.Configured) || !cur.StateSince.Before(listedAt) ||
		cur.Domain != o.Placement.Domain {
		return "", false, nil
	}
	if o.Run.Up() {
		r.runningAgain(cur, listedAt)
		return "", false, nil
	}
	note := runNote(cur, o.Run, listedAt)
	vd := arbiter.MayStart(cur, v, o.Placement.Host)
	if st := r.can.Starter; st != nil && cur.State == record.Idle && o.Run.Inactive() && vd.Kind == arbiter.Act {
		return r.restartIdle(ctx, st, cur, o, note, listedAt, sick)
	} else if cur.State == record.Idle && o.Run.Inactive() && st != nil {
		note += "; not restarted: " + vd.Why
		if vd.Kind == arbiter.Wait {
			r.observeWait(cur.Zone, WaitRestart)
		}
	} else if cur.State == record.Configured {
		note += fmt.Sprintf("; not restarted: the machine is CONFIGURED (cluster %q), BigFleet decides (a Drain cannot run its hook in a stopped guest)", cur.Cluster)
	} else {
		note += "; not restarted: only a shut off or crashed domain is started again"
	}
	r.setRunNote(cur, note, "reconcile: domain not running")
	return o.Run.State, false, nil
}

// runNote is the last_error of a machine whose domain is not running:
// "domain bf-x is shut off (crashed) since <first seen>". The time is when
// a reconcile first saw this state, kept while the state lasts.
func runNote(cur *record.Machine, rs backend.RunState, seen time.Time) string {
	head := runNoteHead(cur.Domain, rs)
	if old, ok := strings.CutPrefix(cur.LastError, head); ok {
		if at, _, ok := strings.Cut(old, ";"); ok {
			return head + at
		}
	}
	return head + seen.UTC().Format(time.RFC3339)
}

func runNoteHead(domain string, rs backend.RunState) string {
	return fmt.Sprintf("domain %s is %s since ", domain, rs)
}

// isRunNote tells our note from any other last_error.
func isRunNote(cur *record.Machine) bool {
	return cur.Domain != "" && strings.HasPrefix(cur.LastError, "domain "+cur.Domain+" is ") &&
		strings.Contains(cur.LastError, " since ")
}

// setRunNote makes note the machine's last_error if it differs ("" clears
// a note of ours), with one WARN per change; nothing changes otherwise, so
// a domain that stays down costs no revision and no log line per pass.
func (r *Reconciler) setRunNote(seen *record.Machine, note, msg string) {
	n, err := r.eng.Update(seen.ID, record.Expect{Revision: seen.Revision}, func(cur, n *record.Machine) error {
		if cur.LastError == note || (note == "" && !isRunNote(cur)) {
			return record.ErrUnchanged
		}
		n.LastError = note
		return nil
	})
	if err != nil {
		return // stale, unchanged, or the next pass tries again
	}
	if note == "" {
		r.log.Info(msg, "machine", n.ID, "domain", n.Domain, "state", n.State.String())
		return
	}
	r.log.Warn(msg, "machine", n.ID, "domain", n.Domain, "zone", n.Zone, "state", n.State.String(), "err", note)
}

// gated runs fn through the machine's call gate, within restartTimeout:
// reconcile's backend calls on one machine never overlap a transition's.
func (r *Reconciler) gated(ctx context.Context, id string, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, restartTimeout)
	defer cancel()
	leave, err := r.enterCall(ctx, id)
	if err != nil {
		return err
	}
	defer leave()
	return fn(ctx)
}

// noteHistory adds a reconcile entry with outcome and note to the history
// of the record m was, if it still is (same operation); a lost or stale
// write leaves the log line and metric that went with it.
func (r *Reconciler) noteHistory(m *record.Machine, outcome, note string) {
	_, _ = r.eng.Update(m.ID, record.Expect{OperationID: m.OperationID}, func(cur, n *record.Machine) error {
		now := r.cfg.Now()
		n.History = record.AppendHistory(n.History, record.Transition{OperationID: n.OperationID, Kind: record.OpReconcile,
			From: cur.State, To: cur.State, Started: now, Ended: now, Outcome: outcome, Note: note})
		return nil
	})
}

// enterCall waits for the machine's call gate for one of reconcile's
// backend calls; its error names the earlier call that did not return.
func (r *Reconciler) enterCall(ctx context.Context, id string) (leave func(), err error) {
	leave, running, err := r.eng.EnterCall(ctx, id, record.OpReconcile)
	if err != nil {
		return nil, fmt.Errorf("the machine's %s call did not return: %w", running, err)
	}
	return leave, nil
}

// restart starts the domain of an IDLE machine through the machine's call
// gate, so it never overlaps a transition's backend call, and only if the
// record is still the one the listing was judged against. tried says
// Start ran (its error is then the host's answer).
func (r *Reconciler) restart(ctx context.Context, st backend.Starter, seen *record.Machine, o backend.Observed) (tried bool, err error) {
	err = r.gated(ctx, seen.ID, func(ctx context.Context) error {
		if cur, ok := r.eng.Get(seen.ID); !ok || cur.State != record.Idle || cur.OperationID != seen.OperationID {
			return fmt.Errorf("the machine changed meanwhile")
		}
		tried = true
		return st.Start(ctx, seen.ID, o.Placement)
	})
	return tried, err
}

// recordRestart logs one counted restart and adds it to the machine's
// history (the admin page's timeline, and the count restartIdle backs off
// on). A Start that worked clears a note left by an earlier try; one that
// failed (startErr) leaves note as the last_error instead.
func (r *Reconciler) recordRestart(seen *record.Machine, was backend.RunState, startErr error, note string) {
	stillIdle := record.Expect{OperationID: seen.OperationID, Holds: func(cur *record.Machine) bool { return cur.State == record.Idle }}
	_, _ = r.eng.Update(seen.ID, stillIdle, func(cur, n *record.Machine) error {
		now := r.cfg.Now()
		t := record.Transition{OperationID: n.OperationID, Kind: record.OpReconcile, From: record.Idle, To: record.Idle, Started: now, Ended: now}
		if startErr == nil {
			t.Outcome, t.LastError = OutcomeRestarted, fmt.Sprintf("domain %s was %s; started again by reconcile", cur.Domain, was)
			r.log.Warn("reconcile: restarted a domain that was not running", "machine", cur.ID, "domain", cur.Domain,
				"zone", cur.Zone, "was", was.String())
			if isRunNote(cur) {
				n.LastError = ""
			}
		} else {
			t.Outcome, t.LastError = OutcomeRestartFailed, startErr.Error()
			n.LastError = note
			r.log.Warn("reconcile: domain not running", "machine", cur.ID, "domain", cur.Domain, "zone", cur.Zone,
				"state", cur.State.String(), "err", note)
		}
		n.History = record.AppendHistory(n.History, t)
		return nil
	}) // lost: the try is not counted, nothing else
}

func (r *Reconciler) observeRestart(zone, from string, ok bool) {
	if r.runObs != nil {
		r.runObs.DomainRestarted(zone, from, ok)
	}
}

func (r *Reconciler) observeNotRunning(byZone map[string]map[string]int) {
	if r.runObs != nil {
		r.runObs.DomainsNotRunning(byZone)
	}
}
