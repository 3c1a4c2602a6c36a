package reconcile

import (
	"context"
	"fmt"
	"strings"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// A zone of several hosts may be listed in part: the hosts that answered,
// and Unlisted the others. A copy of a machine may sit on an unlisted
// host (a migration's destination cut off by the partition that cut the
// migration, a duplicate a crash left), so a decision that depends on all
// of a machine's copies — which copy of an interrupted migration lives,
// whether a duplicate is a spare — is not taken on a partial listing: the
// pass waits for a listing of the whole zone, and says so (a WARN line,
// the report's Waiting, WaitObserver). Deciding on a partial listing
// resumed a paused source while the destination ran the guest: two
// running copies of one node (issue 31).

// WaitObserver is told of each decision a pass deferred because hosts of
// the zone were unlisted: decision is "migration_recovery",
// "duplicate_removal" or "leftover_removal".
type WaitObserver interface {
	WaitingOnUnlisted(zone, decision string)
}

// Decisions that wait for a whole zone.
const (
	WaitMigrationRecovery = "migration_recovery"
	WaitDuplicateRemoval  = "duplicate_removal"
	WaitLeftoverRemoval   = "leftover_removal"
	// WaitRelocation: a machine's domain runs on another host than its
	// record says, and the recorded host, which may run it too, is not
	// listed (arbiter.Relocate).
	WaitRelocation = "relocation"
	// WaitRestart: an IDLE machine's stopped domain is not started while
	// a host that may run the guest is not listed (arbiter.MayStart).
	WaitRestart = "restart"
)

// wait records that decision on machine m waits for the unlisted hosts.
func (p *pass) wait(m *record.Machine, decision string, zi backend.ZoneInventory) {
	why := fmt.Sprintf("%s: %s waits for host(s) %s of zone %s, not listed this pass",
		m.ID, strings.ReplaceAll(decision, "_", " "), strings.Join(zi.Unlisted, ", "), zi.Zone)
	p.r.log.Warn("reconcile: decision deferred until the whole zone is listed", "machine", m.ID, "zone", zi.Zone,
		"decision", decision, "unlisted", zi.Unlisted)
	p.mu.Lock()
	p.rep.Waiting = append(p.rep.Waiting, why)
	p.mu.Unlock()
	if p.r.waitObs != nil {
		p.r.waitObs.WaitingOnUnlisted(zi.Zone, decision)
	}
}

// observeWait tells the WaitObserver of a deferred decision.
func (r *Reconciler) observeWait(zone, decision string) {
	if r.waitObs != nil {
		r.waitObs.WaitingOnUnlisted(zone, decision)
	}
}

// leftover queues the removal of a copy of a machine a Delete returned to
// its slot (see deleted): BigFleet saw the Delete succeed, so the copy is
// what the Delete did not reach, never the machine. It is removed through
// the machine's call gate, only while the record is still that Delete's,
// and only from a whole zone's listing.
func (p *pass) leftover(m *record.Machine, o backend.Observed, zi backend.ZoneInventory) {
	if !deleted(m) { // a seed or rebuilt record: o carries a Delete's intent
		p.resumeDelete(m, o)
		return
	}
	if len(zi.Unlisted) > 0 {
		p.wait(m, WaitLeftoverRemoval, zi)
		return
	}
	p.queueDelete(m, o, p.r.recordLeftover)
}

// queueDelete queues the Delete of copy o of the machine whose record m
// is a Delete's (deleted), on o's host, through the machine's call gate,
// only while the record is still that Delete's; done is told the
// outcome.
func (p *pass) queueDelete(m *record.Machine, o backend.Observed, done func(*record.Machine, backend.Observed, error)) {
	r := p.r
	p.queue(hostKey(o.Placement.Zone, o.Placement.Host), func(ctx context.Context, sick bool) error {
		if sick {
			return nil
		}
		return r.gated(ctx, m.ID, func(ctx context.Context) error {
			if cur, ok := r.eng.Get(m.ID); !ok || !deleted(cur) || cur.OperationID != m.OperationID {
				return nil // a Create since: the copy is judged again next pass
			}
			err := r.be.Delete(ctx, backend.DeleteSpec{MachineID: m.ID, OperationID: m.OperationID, Zone: m.Zone, Placement: o.Placement})
			done(m, o, err)
			return err
		})
	})
}

// recordLeftover logs, counts and adds to the history the removal of a
// deleted machine's leftover copy (or its failure: retried next pass).
func (r *Reconciler) recordLeftover(m *record.Machine, o backend.Observed, rmErr error) {
	outcome, metric := OutcomeLeftoverRemoved, "removed"
	note := fmt.Sprintf("domain %s on host %s outlived the machine's Delete (a copy it did not reach); removed, not adopted",
		o.Placement.Domain, o.Placement.Host)
	if rmErr != nil {
		outcome, metric = OutcomeLeftoverFailed, "failed"
		note = fmt.Sprintf("domain %s on host %s outlived the machine's Delete; not removed: %v", o.Placement.Domain, o.Placement.Host, rmErr)
		r.log.Warn("reconcile: a deleted machine's leftover domain not removed", "machine", m.ID, "zone", m.Zone,
			"host", o.Placement.Host, "err", rmErr)
	} else {
		r.log.Warn("reconcile: a deleted machine's leftover domain removed", "machine", m.ID, "zone", m.Zone,
			"host", o.Placement.Host, "domain", o.Placement.Domain)
	}
	r.observeDuplicate(m.Zone, metric)
	r.noteHistory(m, outcome, note)
}

// Outcomes of a deleted machine's leftover copy, in history entries.
const (
	OutcomeLeftoverRemoved = "leftover_removed"
	OutcomeLeftoverFailed  = "leftover_failed"
)
