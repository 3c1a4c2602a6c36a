package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// ReconcileReport summarises one reconcile pass (for logs and the admin API).
type ReconcileReport struct {
	At       time.Time
	Adopted  int
	Vanished int
	// Restarted counts IDLE machines whose stopped domain was started
	// again; NotRunning the IDLE or CONFIGURED ones whose domain is still
	// not running after the pass (each named in its last_error).
	Restarted  int
	NotRunning int
	Zones      map[string]string // zone → "" (ok) or the error that stopped it
}

// reconcileLoop reconciles at startup and every ReconcileInterval, and
// sweeps after each reconcile and every SweepInterval (the sweep runs even
// when periodic reconcile is off: a record must never stay transitional).
// It stops as soon as a shutdown begins.
func (e *Engine) reconcileLoop() {
	ctx := e.recCtx
	e.Reconcile(ctx)
	var reconcileTick <-chan time.Time
	if e.cfg.ReconcileInterval > 0 {
		t := time.NewTicker(e.cfg.ReconcileInterval)
		defer t.Stop()
		reconcileTick = t.C
	}
	sweep := time.NewTicker(e.cfg.SweepInterval)
	defer sweep.Stop()
	for ctx.Err() == nil {
		e.Sweep()
		select {
		case <-ctx.Done():
		case <-reconcileTick:
			e.Reconcile(ctx)
		case <-e.listed.kick:
			e.Reconcile(ctx)
		case <-sweep.C:
		}
	}
}

// Reconcile compares what the hosts hold with the records. Our own domains
// under SPECULATIVE records are adopted (a lost state file is rebuilt from
// libvirt), a VM that vanished under an IDLE or CONFIGURED record turns it
// FAILED, domains that are not ours are never seen here (the backend only
// lists its own), and records change (so the revision moves) only on a real
// difference. A host whose listing failed is skipped, never read as empty.
// A domain of ours that is not running is handled by checkRun: an IDLE
// machine's is started again (with backoff), any other is reported, never
// FAILED. Each zone is judged and marked listed as soon as its listing
// arrives; lookups and restarts run after the listings (pass.go).
func (e *Engine) Reconcile(ctx context.Context) ReconcileReport {
	p := e.newPass()
	p.list(ctx)
	p.runQueued(ctx)
	e.observeNotRunning(p.down)
	e.listed.passed()
	rep := p.rep
	e.setLastReconcile(rep)
	if rep.Adopted+rep.Vanished+rep.Restarted > 0 {
		e.log.Info("reconcile changed machines", "adopted", rep.Adopted, "vanished", rep.Vanished, "restarted", rep.Restarted)
	}
	return rep
}

func (e *Engine) reconcileOne(id string, o backend.Observed, found bool, listedAt time.Time) string {
	// A record that changed after the hosts were listed is judged next time:
	// the listing may predate a Create or Delete that just finished.
	unchanged := record.Expect{Holds: func(cur *Machine) bool { return cur.StateSince.Before(listedAt) }}
	var what string
	n, err := e.update(id, unchanged, func(cur, n *Machine) error {
		now := e.cfg.Now()
		switch {
		case cur.State == Speculative && found:
			what = "adopted"
			n.State = Idle
			n.Domain, n.HostName = o.Placement.Domain, o.Placement.Host
			n.Host = HostRef{Provider: e.cfg.Provider, Ref: o.Placement.Ref()}
			if o.OperationID != "" {
				n.OperationID = o.OperationID
			}
			n.OpKind = OpReconcile
			if o.ClusterID != "" {
				n.State = Configured
				n.Cluster = o.ClusterID
				n.ShardMetadata = cloneMap(o.ShardMetadata)
			}
			n.History = appendHistory(n.History, Transition{OperationID: n.OperationID, Kind: OpReconcile,
				From: cur.State, To: n.State, Started: now, Ended: now, Outcome: "adopted"})
		case (cur.State == Idle || cur.State == Configured) && found && relocated(cur, o):
			what = "relocated"
			n.HostName = o.Placement.Host
			n.Host = HostRef{Provider: e.cfg.Provider, Ref: o.Placement.Ref()}
			n.History = appendHistory(n.History, Transition{OperationID: n.OperationID, Kind: OpReconcile,
				From: cur.State, To: cur.State, Started: now, Ended: now, Outcome: "relocated",
				Note: fmt.Sprintf("domain %s found running on host %s, not %s: a migration the provider did not record (cut by a restart?)",
					cur.Domain, o.Placement.Host, cur.HostName)})
		case (cur.State == Idle || cur.State == Configured) && !found:
			what = "vanished"
			n.State = Failed
			n.LastError = fmt.Sprintf("VM %q vanished from host %q: found missing by reconcile", cur.Domain, cur.Zone)
			n.History = appendHistory(n.History, Transition{OperationID: n.OperationID, Kind: OpReconcile,
				From: cur.State, To: Failed, Started: now, Ended: now, Outcome: "failed", LastError: n.LastError})
		default:
			return errUnchanged
		}
		if what != "relocated" {
			n.StateSince = now
		}
		return nil
	})
	if err != nil {
		return ""
	}
	attrs := []any{"machine", id, "change", what, "state", n.State.String()}
	if n.LastError != "" {
		attrs = append(attrs, "err", n.LastError)
	}
	e.log.Warn("reconcile", attrs...)
	return what
}

// relocated reports whether the machine's domain runs on another host of
// its zone than its record says: a migration that finished in libvirt but
// was never recorded (the provider stopped before it could).
func relocated(cur *Machine, o backend.Observed) bool {
	return cur.HostName != "" && o.Placement.Host != "" && o.Placement.Host != cur.HostName &&
		o.Placement.Domain == cur.Domain && o.Run.Up()
}

// needsConfirm reports whether a machine missing from a complete listing
// needs ConfirmGone before it may vanish. Only an IDLE or CONFIGURED record
// unchanged since the listing can vanish, and then only if a backend that
// can check (backend.Confirmer) confirms its VM is gone. Backends without
// the check are trusted on their listing alone.
func (e *Engine) needsConfirm(m *Machine, listedAt time.Time) bool {
	return e.can.Confirmer != nil && (m.State == Idle || m.State == Configured) && m.StateSince.Before(listedAt)
}

// keepMissing reports whether a machine missing from a complete listing
// must be kept anyway: an error (returned too), or a VM the listing missed
// but a direct lookup found, keeps it.
func (e *Engine) keepMissing(ctx context.Context, m *Machine, listedAt time.Time) (bool, error) {
	if !e.needsConfirm(m, listedAt) {
		return false, nil
	}
	gone, err := e.can.Confirmer.ConfirmGone(ctx, m.ID, m.Placement())
	switch {
	case err != nil:
		e.log.Warn("reconcile: VM missing from the listing, its absence not confirmed; machine kept", "machine", m.ID, "err", err)
	case !gone:
		e.log.Warn("reconcile: VM missing from the listing but found by a direct lookup; machine kept", "machine", m.ID, "domain", m.Domain)
	}
	return !gone || err != nil, err
}

func (e *Engine) setLastReconcile(r ReconcileReport) {
	e.repMu.Lock()
	e.lastRep = r
	e.repMu.Unlock()
}

// LastReconcile returns the report of the most recent reconcile pass.
func (e *Engine) LastReconcile() ReconcileReport {
	e.repMu.Lock()
	defer e.repMu.Unlock()
	return e.lastRep
}
