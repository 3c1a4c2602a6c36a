package reconcile

import (
	"context"
	"fmt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// A machine must have exactly one domain. In a zone of several hosts a
// listing can show two: a Create an older provider resumed on another host
// after a crash, a copy made by hand. Reconcile keeps the copy that
// matches the record (its recorded host; without one, the only copy bound
// to the record's cluster, or the only one running) and treats it as the
// machine. Another copy is removed (backend.CopyRemover) only on positive
// evidence that it is not the live one, checked again by the backend just
// before: the kept copy runs, the spare one was never bound to a cluster
// (no node ever joined from it) and is not paused (a migration's copy is
// left to its recovery). Anything short of that is reported and kept.

// DuplicateObserver is an Observer that is also told of every duplicate
// domain reconcile met: outcome is "removed", "kept" (no proof it is a
// spare, or the record is busy) or "failed" (the removal did not finish).
type DuplicateObserver interface {
	DuplicateDomain(zone, outcome string)
}

// Outcomes of a duplicate, in history entries and the metric.
const (
	OutcomeDuplicateRemoved = "duplicate_removed"
	OutcomeDuplicateKept    = "duplicate_kept"
	OutcomeDuplicateFailed  = "duplicate_failed"
)

// copiesOf returns, for each machine listed more than once, its copies.
func copiesOf(obs []backend.Observed) map[string][]backend.Observed {
	n := map[string]int{}
	for _, o := range obs {
		n[o.MachineID]++
	}
	var out map[string][]backend.Observed
	for _, o := range obs {
		if n[o.MachineID] > 1 {
			if out == nil {
				out = map[string][]backend.Observed{}
			}
			out[o.MachineID] = append(out[o.MachineID], o)
		}
	}
	return out
}

// keepCopy picks the copy that is the machine m, if the record says which.
// The recorded host's copy is the machine unless it is not running while
// exactly one other copy runs: then the guest lives there (a migration
// that left its source defined and shut off, such as virsh migrate
// without --undefinesource) and the machine follows it; restarting the
// stale copy would run the node twice.
func keepCopy(m *record.Machine, copies []backend.Observed) (int, bool) {
	if m.HostName != "" {
		k, ok := soleMatch(copies, func(o backend.Observed) bool { return o.Placement.Host == m.HostName })
		if ok && !copies[k].Run.Up() {
			if up, one := soleMatch(copies, func(o backend.Observed) bool { return o.Run.Up() }); one {
				return up, true
			}
		}
		return k, ok
	}
	if m.Cluster != "" {
		return soleMatch(copies, func(o backend.Observed) bool { return o.ClusterID == m.Cluster })
	}
	return soleMatch(copies, func(o backend.Observed) bool { return o.Run.Up() })
}

// soleMatch is the index of the one copy that matches, if exactly one does.
func soleMatch(copies []backend.Observed, match func(backend.Observed) bool) (int, bool) {
	at := -1
	for i, o := range copies {
		if match(o) {
			if at >= 0 {
				return -1, false
			}
			at = i
		}
	}
	return at, at >= 0
}

// whyNotSpare says why copy c may not be removed while keep is kept ("" if
// the listing shows the evidence; the backend checks it again).
func whyNotSpare(keep, c backend.Observed) string {
	switch {
	case !keep.Run.Up():
		return fmt.Sprintf("the kept copy on host %s is %s", keep.Placement.Host, keep.Run)
	case c.ClusterID != "":
		return fmt.Sprintf("the copy on host %s is bound to cluster %q", c.Placement.Host, c.ClusterID)
	case c.Run.State == backend.RunPaused:
		return fmt.Sprintf("the copy on host %s is paused (a migration's?)", c.Placement.Host)
	}
	return ""
}

// duplicates handles the machines a zone's listing shows more than once:
// seen[id] becomes the kept copy, and the removal of each provable spare
// is queued on its host.
func (p *pass) duplicates(zi backend.ZoneInventory, seen map[string]backend.Observed) {
	r, at := p.r, p.rep.At
	for id, copies := range copiesOf(zi.Machines) {
		m, ok := r.eng.Get(id)
		if !ok {
			continue
		}
		k, ok := keepCopy(m, copies)
		if !ok {
			r.noteDuplicate(m, copies[0], "the record does not say which copy is the machine")
			continue
		}
		keep := copies[k]
		seen[id] = keep
		stable := (m.State == record.Idle || m.State == record.Configured) && m.StateSince.Before(at) && !r.eng.Migrating(id, at)
		for i, c := range copies {
			switch why := whyNotSpare(keep, c); {
			case i == k:
			case !stable:
				r.noteDuplicate(m, c, "the machine is "+m.State.String()+"; judged when it is idle or configured")
			case why != "":
				r.noteDuplicate(m, c, why)
			case len(zi.Unlisted) > 0:
				p.wait(m, WaitDuplicateRemoval, zi) // a third copy, the live one, may be there
			default:
				p.queue(hostKey(c.Placement.Zone, c.Placement.Host), func(ctx context.Context, sick bool) error {
					return r.removeCopy(ctx, m, c, keep, sick)
				})
			}
		}
	}
}

// noteDuplicate reports a copy left in place: a WARN line and the metric
// each pass it is seen (the operator must act), no record change.
func (r *Reconciler) noteDuplicate(m *record.Machine, c backend.Observed, why string) {
	r.log.Warn("reconcile: machine has a domain on more than one host; copy kept", "machine", m.ID, "zone", m.Zone,
		"host", c.Placement.Host, "domain", c.Placement.Domain, "recorded_host", m.HostName, "why", why)
	r.observeDuplicate(m.Zone, "kept")
}

// removeCopy is the queued removal of one spare copy, through the
// machine's call gate; it is recorded in the machine's history.
func (r *Reconciler) removeCopy(ctx context.Context, seen *record.Machine, c, keep backend.Observed, sick bool) error {
	rm := r.can.CopyRemover
	if rm == nil || sick {
		if rm == nil {
			r.noteDuplicate(seen, c, "the backend cannot remove copies")
		}
		return nil
	}
	return r.gated(ctx, seen.ID, func(ctx context.Context) error {
		if cur, ok := r.eng.Get(seen.ID); !ok || cur.Revision != seen.Revision {
			return nil // the machine changed since the listing: next pass
		}
		err := rm.RemoveCopy(ctx, seen.ID, c.Placement, keep.Placement)
		r.recordDuplicate(seen, c, keep, err)
		return err
	})
}

// recordDuplicate adds the removal (or its failure) to the machine's
// history, logs it and counts it.
func (r *Reconciler) recordDuplicate(seen *record.Machine, c, keep backend.Observed, rmErr error) {
	outcome, metric := OutcomeDuplicateRemoved, "removed"
	note := fmt.Sprintf("domain %s also on host %s (never bound to a cluster) removed; the machine is the copy on host %s",
		c.Placement.Domain, c.Placement.Host, keep.Placement.Host)
	if rmErr != nil {
		outcome, metric = OutcomeDuplicateFailed, "failed"
		note = fmt.Sprintf("domain %s also on host %s not removed: %v", c.Placement.Domain, c.Placement.Host, rmErr)
		r.log.Warn("reconcile: duplicate domain not removed", "machine", seen.ID, "zone", seen.Zone,
			"host", c.Placement.Host, "kept_on", keep.Placement.Host, "err", rmErr)
	} else {
		r.log.Warn("reconcile: duplicate domain removed", "machine", seen.ID, "zone", seen.Zone,
			"host", c.Placement.Host, "kept_on", keep.Placement.Host)
	}
	r.observeDuplicate(seen.Zone, metric)
	r.noteHistory(seen, outcome, note)
}

func (r *Reconciler) observeDuplicate(zone, outcome string) {
	if r.dupObs != nil {
		r.dupObs.DuplicateDomain(zone, outcome)
	}
}
