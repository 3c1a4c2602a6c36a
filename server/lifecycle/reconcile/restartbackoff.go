package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Restarts of a crashed IDLE machine back off and give up. The tries are
// counted in the machine's history, so the count survives a provider
// restart with the state file: the trailing run of reconcile entries
// "restarted" (Start worked) and "restart failed" (the host refused to
// start it) is the number of restarts since the last successful boot.
// Any other entry ends the run: a transition (Configure, Delete, …), an
// adoption or relocation, and "boot confirmed", which reconcile appends
// when it sees the domain running at a pass at least bootHold (10 ×
// RestartBackoff, 5 min by default) after the last restart. That is the
// definition of a successful boot: the guest stayed up that long (or
// reached a transition). It must be well past a boot's length: a guest
// that dies a few seconds into every boot is seen running at some pass
// in between, and a shorter hold would reset its count each time.
//
// The first restart is made at once; restart n+1 waits RestartBackoff ×
// 2^(n-1) after restart n, capped at 32×RestartBackoff. A pass that finds
// the domain stopped again after RestartMaxTries restarts gives up: the
// last_error says so, one WARN, a "restart given up" history entry and
// RestartObserver.RestartGaveUp. Nothing is retried after that until the
// domain is seen running again for the boot hold (an operator started
// it) or the machine leaves IDLE. A Start that did not reach the guest
// (host unreachable, machine busy with a transition) costs no try.

// Restart defaults (Config).
const (
	DefaultRestartBackoff  = 30 * time.Second
	DefaultRestartMaxTries = 5
	restartBackoffCap      = 32 // × RestartBackoff
	bootHoldFactor         = 10 // × RestartBackoff: a boot that held (see above)
)

// History outcomes of reconcile's restarts.
const (
	OutcomeRestarted     = "restarted"
	OutcomeRestartFailed = "restart failed"
	OutcomeGaveUp        = "restart given up"
	OutcomeBootConfirmed = "boot confirmed"
)

// RestartObserver is an Observer that is also told when reconcile gives
// up restarting a machine (the metrics implement it).
type RestartObserver interface {
	RestartGaveUp(zone string)
}

func (r *Reconciler) restartBackoff() time.Duration {
	if b := r.cfg.RestartBackoff; b > 0 {
		return b
	}
	return DefaultRestartBackoff
}

func (r *Reconciler) restartMaxTries() int {
	n := r.cfg.RestartMaxTries
	if n <= 0 {
		n = DefaultRestartMaxTries
	}
	return min(n, record.HistoryLimit-1)
}

// restartDelay is the wait after the tries-th restart before the next.
func (r *Reconciler) restartDelay(tries int) time.Duration {
	return r.restartBackoff() * time.Duration(min(1<<max(tries-1, 0), restartBackoffCap))
}

// restartTrail is what a machine's history says about its restarts.
type restartTrail struct {
	tries   int       // restarts since the last successful boot
	last    time.Time // when the last of them ran
	lastErr string    // why it failed ("" when Start worked)
	gaveUp  string    // the give-up message, once given up
}

func restartTrailOf(h []record.Transition) restartTrail {
	var tr restartTrail
	for i := len(h) - 1; i >= 0 && h[i].Kind == record.OpReconcile; i-- {
		switch t := h[i]; {
		case t.Outcome == OutcomeGaveUp && i == len(h)-1:
			tr.gaveUp = t.LastError
		case t.Outcome == OutcomeRestarted || t.Outcome == OutcomeRestartFailed:
			if tr.tries == 0 {
				tr.last = t.Ended
				if t.Outcome == OutcomeRestartFailed {
					tr.lastErr = t.LastError
				}
			}
			tr.tries++
		default:
			return tr
		}
	}
	return tr
}

// restartIdle decides, for an IDLE machine whose domain is shut off or
// crashed, between starting it now, waiting out the backoff and giving up,
// and says which in the last_error (note is the run note so far).
func (r *Reconciler) restartIdle(ctx context.Context, st backend.Starter, cur *record.Machine, o backend.Observed,
	note string, listedAt time.Time, sick bool) (string, bool, error) {
	tr := restartTrailOf(cur.History)
	maxTries := r.restartMaxTries()
	switch {
	case tr.tries > 0 && !tr.last.Before(listedAt):
		return o.Run.State, false, nil // the listing predates our last restart: judged next pass
	case r.cfg.RestartDisabled:
		note += "; not restarted: restarts are disabled"
	case tr.gaveUp != "":
		note += "; " + tr.gaveUp
	case tr.tries >= maxTries:
		r.giveUpRestart(cur, o, note, tr)
		return o.Run.State, false, nil
	case tr.tries > 0 && r.cfg.Now().Before(tr.last.Add(r.restartDelay(tr.tries))):
		note += r.waitNote(tr, maxTries)
	case sick:
		return o.Run.State, false, nil // the host failed a call this pass: next pass
	default:
		return r.tryRestart(ctx, st, cur, o, note, tr)
	}
	r.setRunNote(cur, note, "reconcile: domain not running")
	return o.Run.State, false, nil
}

// tryRestart starts the domain and records the try. A Start that did not
// reach the guest is reported but not counted.
func (r *Reconciler) tryRestart(ctx context.Context, st backend.Starter, cur *record.Machine, o backend.Observed,
	note string, tr restartTrail) (string, bool, error) {
	tried, err := r.restart(ctx, st, cur, o)
	r.observeRestart(cur.Zone, o.Run.State, err == nil)
	if err == nil {
		r.recordRestart(cur, o.Run, nil, "")
		return "", true, nil
	}
	if !tried || hostUnreachable(err) || errors.Is(err, context.Canceled) {
		r.setRunNote(cur, note+fmt.Sprintf("; reconcile could not start it again: %v", err), "reconcile: domain not running")
		if !tried {
			err = nil // the machine's, not the host's
		}
		return o.Run.State, false, err
	}
	next := restartTrail{tries: tr.tries + 1, last: r.cfg.Now(), lastErr: err.Error()}
	r.recordRestart(cur, o.Run, err, note+r.waitNote(next, r.restartMaxTries()))
	return o.Run.State, false, err
}

// waitNote ends the last_error of a machine between two restarts: how the
// last one went and when the next is due. It depends on the history only,
// so it reads the same at every pass of the wait (no revision per pass).
func (r *Reconciler) waitNote(tr restartTrail, maxTries int) string {
	s := fmt.Sprintf("; reconcile started it again at %s and it stopped again", tr.last.UTC().Format(time.RFC3339))
	if tr.lastErr != "" {
		s = "; reconcile could not start it again: " + tr.lastErr
	}
	if tr.tries < maxTries {
		s += fmt.Sprintf("; next restart (try %d of %d) at %s", tr.tries+1, maxTries,
			tr.last.Add(r.restartDelay(tr.tries)).UTC().Format(time.RFC3339))
	}
	return s
}

// giveUpRestart records that reconcile stops restarting the machine: its
// last_error says so, with a WARN, a history entry and the metric.
func (r *Reconciler) giveUpRestart(seen *record.Machine, o backend.Observed, note string, tr restartTrail) {
	last := fmt.Sprintf("last stop: %s", o.Run)
	if tr.lastErr != "" {
		last = "last start failed: " + tr.lastErr
	}
	msg := fmt.Sprintf("reconcile gave up restarting it after %d tries (%s)", tr.tries, last)
	n, err := r.eng.Update(seen.ID, record.Expect{Revision: seen.Revision}, func(_, n *record.Machine) error {
		now := r.cfg.Now()
		n.LastError = note + "; " + msg
		n.History = record.AppendHistory(n.History, record.Transition{OperationID: n.OperationID, Kind: record.OpReconcile,
			From: record.Idle, To: record.Idle, Started: now, Ended: now, Outcome: OutcomeGaveUp, LastError: msg})
		return nil
	})
	if err != nil {
		return // changed meanwhile, or not committed: the next pass judges it again
	}
	r.log.Warn("reconcile: gave up restarting a domain that does not stay up", "machine", n.ID,
		"domain", n.Domain, "zone", n.Zone, "tries", tr.tries, "err", n.LastError)
	if r.restartObs != nil {
		r.restartObs.RestartGaveUp(n.Zone)
	}
}

// runningAgain handles a domain seen running: our not-running note is
// cleared, and a machine restarted at least the boot hold before this
// listing has booted, which resets its restart count ("boot confirmed").
func (r *Reconciler) runningAgain(seen *record.Machine, listedAt time.Time) {
	tr := restartTrailOf(seen.History)
	booted := (tr.tries > 0 || tr.gaveUp != "") && !listedAt.Before(tr.last.Add(bootHoldFactor*r.restartBackoff()))
	if !booted && !isRunNote(seen) {
		return // the common case: nothing to write
	}
	var cleared bool
	n, err := r.eng.Update(seen.ID, record.Expect{Revision: seen.Revision}, func(cur, n *record.Machine) error {
		if cleared = isRunNote(cur); cleared {
			n.LastError = ""
		}
		if booted {
			now := r.cfg.Now()
			n.History = record.AppendHistory(n.History, record.Transition{OperationID: n.OperationID, Kind: record.OpReconcile,
				From: cur.State, To: cur.State, Started: now, Ended: now, Outcome: OutcomeBootConfirmed,
				Note: fmt.Sprintf("domain %s running %s after reconcile's last restart: restart count reset", cur.Domain, listedAt.Sub(tr.last).Round(time.Second))})
		}
		return nil
	})
	if err != nil {
		return // changed meanwhile, or the next pass tries again
	}
	if cleared {
		r.log.Info("reconcile: domain running again", "machine", n.ID, "domain", n.Domain, "state", n.State.String())
	}
}
