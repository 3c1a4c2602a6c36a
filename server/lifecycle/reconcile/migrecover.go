package reconcile

import (
	"context"
	"fmt"
	"strings"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// A migration is driven by the provider process (managed migration): if
// it dies after QEMU copied the guest but before libvirt's confirm step,
// the source stays paused with reason "migration" and the destination may
// hold a copy. Nothing else would ever resume or remove them, so reconcile
// recovers such a machine (backend.MigrationRecoverer): libvirt's state
// says which copy is live, the other goes, and a paused kept copy is
// resumed. duplicates.go leaves paused copies alone for this.

// Outcomes of a recovery, in history entries.
const OutcomeMigrationRecovered = "migration_recovered"

// MigrationRecoveryObserver is told of each interrupted migration reconcile
// recovered, by zone and outcome: "completed" (the destination ran the
// guest; the source's copy went), "resumed" (the paused source was
// resumed) or "running" (a copy was already running and was kept). An
// Observer that also implements it gets these calls.
type MigrationRecoveryObserver interface {
	MigrationRecovered(zone, outcome string)
}

func recoveryOutcome(res backend.MigrationRecovery) string {
	switch {
	case res.Completed:
		return "completed"
	case res.Resumed:
		return "resumed"
	}
	return "running"
}

// interrupted returns, by machine, the listed copies of each machine one
// of whose copies a migration paused.
func interrupted(obs []backend.Observed) map[string][]backend.Observed {
	var out map[string][]backend.Observed
	for _, o := range obs {
		if o.Run.State == backend.RunPaused && o.Run.Reason == "migrating" {
			if out == nil {
				out = map[string][]backend.Observed{}
			}
			out[o.MachineID] = nil
		}
	}
	for _, o := range obs {
		if _, ok := out[o.MachineID]; ok {
			out[o.MachineID] = append(out[o.MachineID], o)
		}
	}
	return out
}

// migrations queues the recovery of each machine of a zone's listing that
// a migration left paused. The record is read before the pass judges it
// (it may relocate the machine onto a running copy), so recorded is the
// host the migration started from.
func (p *pass) migrations(zi backend.ZoneInventory) {
	r, at := p.r, p.rep.At
	rec := r.can.MigrationRecoverer
	if rec == nil {
		return
	}
	for id, copies := range interrupted(zi.Machines) {
		m, ok := r.eng.Get(id)
		if !ok || r.eng.Migrating(id, at) || (m.State != record.Idle && m.State != record.Configured) {
			continue // not ours, a migration of this process under way, or busy: next pass
		}
		if len(zi.Unlisted) > 0 {
			p.wait(m, WaitMigrationRecovery, zi) // the destination may be among them, running the guest
			continue
		}
		p.queue(hostKey(m.Zone, m.HostName), func(ctx context.Context, sick bool) error {
			return r.recoverMigration(ctx, rec, m, copies, sick)
		})
	}
}

// recoverMigration is the queued recovery of one machine, through its
// call gate.
func (r *Reconciler) recoverMigration(ctx context.Context, rec backend.MigrationRecoverer, m *record.Machine, copies []backend.Observed, sick bool) error {
	if sick {
		return nil
	}
	return r.gated(ctx, m.ID, func(ctx context.Context) error {
		if r.eng.Migrating(m.ID, r.cfg.Now()) {
			return nil
		}
		// Waiting its turn at the gate, the machine may have moved on (a
		// transition accepted, a migration of this process): the copies
		// listed no longer say where it is.
		if cur, ok := r.eng.Get(m.ID); !ok || cur.OperationID != m.OperationID || cur.State != m.State {
			return nil
		}
		pls := make([]backend.Placement, len(copies))
		for i, c := range copies {
			pls[i] = c.Placement
		}
		res, err := rec.RecoverMigration(ctx, m.ID, m.Placement(), pls)
		if err != nil {
			r.log.Warn("reconcile: interrupted migration not recovered", "machine", m.ID, "zone", m.Zone,
				"recorded_host", m.HostName, "err", err)
			return err
		}
		r.recordRecovery(m, res)
		return nil
	})
}

// recordRecovery logs what was done, records the machine on the host its
// VM runs on and adds a history entry saying so.
func (r *Reconciler) recordRecovery(m *record.Machine, res backend.MigrationRecovery) {
	note := recoveryNote(m, res)
	r.log.Warn("reconcile: interrupted migration recovered", "machine", m.ID, "zone", m.Zone,
		"from", m.HostName, "runs_on", res.Live.Host, "completed", res.Completed, "resumed", res.Resumed, "note", note)
	if r.recObs != nil {
		r.recObs.MigrationRecovered(m.Zone, recoveryOutcome(res))
	}
	// Only the record the recovery was judged on: a transition accepted
	// since (a new operation id) owns the record now, and its own run
	// says where the VM is; the next pass sees the machine again.
	_, _ = r.eng.Update(m.ID, record.Expect{OperationID: m.OperationID}, func(cur, n *record.Machine) error {
		now := r.cfg.Now()
		if cur.HostName != res.Live.Host {
			n.HostName = res.Live.Host
			n.Host = record.HostRef{Provider: r.cfg.Provider, Ref: res.Live.Ref()}
		}
		n.History = record.AppendHistory(n.History, record.Transition{OperationID: n.OperationID, Kind: record.OpReconcile,
			From: cur.State, To: cur.State, Started: now, Ended: now, Outcome: OutcomeMigrationRecovered, Note: note})
		return nil
	}) // lost or stale: the log line remains, and libvirt's state
}

func recoveryNote(m *record.Machine, res backend.MigrationRecovery) string {
	var removed []string
	for _, pl := range res.Removed {
		removed = append(removed, "host "+pl.Host)
	}
	gone := "nothing removed"
	if len(removed) > 0 {
		gone = "the copy on " + strings.Join(removed, ", ") + " removed"
	}
	if res.Completed {
		return fmt.Sprintf("interrupted migration from host %s had completed: the VM runs on host %s; %s", m.HostName, res.Live.Host, gone)
	}
	what := "kept running"
	if res.Resumed {
		what = "resumed"
	}
	return fmt.Sprintf("interrupted migration from host %s had not completed: the VM %s on host %s; %s", m.HostName, what, res.Live.Host, gone)
}
