package reconcile

import (
	"context"
	"fmt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// A host declared down rejoins fenced. While the declaration lasts, what
// the host holds when it answers again comes up as Fenced copies, never
// as the machine. A copy of a machine that lives elsewhere now (its
// record names another host) or was deleted is stale: it is destroyed,
// never started, through the machine's call gate. Any other copy (the
// record still names this host: a machine the declaration FAILED, one
// rebuilt after a lost state file) is reported and kept; the operator
// ends the declaration with `libvirtctl up HOST`, after which the host's
// listing counts again.

// History outcomes of the fenced rejoin.
const (
	OutcomeFencedDestroyed = "fenced_copy_destroyed"
	OutcomeFencedFailed    = "fenced_copy_failed"
)

// fenced queues the destruction of each stale copy the zone's declared-
// down hosts hold, and reports the others.
func (p *pass) fenced(zi backend.ZoneInventory) {
	r := p.r
	for _, o := range zi.Fenced {
		m, known := r.eng.Get(o.MachineID)
		why, stale := staleFenced(m, known, o)
		if !stale || r.can.FencedDestroyer == nil {
			r.log.Warn("fenced rejoin: a copy on a host declared down kept; it counts once the declaration ends (libvirtctl up)",
				"machine", o.MachineID, "zone", zi.Zone, "host", o.Placement.Host, "domain", o.Placement.Domain, "run", o.Run.String(), "why", why)
			continue
		}
		p.queue(hostKey(o.Placement.Zone, o.Placement.Host), func(ctx context.Context, sick bool) error {
			if sick {
				return nil
			}
			return r.gated(ctx, m.ID, func(ctx context.Context) error {
				if cur, ok := r.eng.Get(m.ID); !ok || cur.Revision != m.Revision {
					return nil // changed since the listing: judged next pass
				}
				err := r.can.FencedDestroyer.DestroyFenced(ctx, m.ID, o.Placement)
				r.recordFenced(m, o, why, err)
				return err
			})
		})
	}
}

// staleFenced says whether a fenced copy is stale, and why (or why not).
func staleFenced(m *record.Machine, known bool, o backend.Observed) (string, bool) {
	switch {
	case !known:
		return "no machine has its id", false
	case deleted(m):
		return "the machine was deleted", true
	case m.HostName != "" && m.HostName != o.Placement.Host && m.State != record.Speculative:
		return fmt.Sprintf("the machine lives on host %s (%s)", m.HostName, m.State), true
	}
	return fmt.Sprintf("the machine's record (%s) names this host or none", m.State), false
}

// recordFenced logs and adds to the history one stale copy's removal.
func (r *Reconciler) recordFenced(m *record.Machine, o backend.Observed, why string, err error) {
	note := fmt.Sprintf("domain %s on host %s, declared down, was stale (%s): destroyed, never started", o.Placement.Domain, o.Placement.Host, why)
	outcome := OutcomeFencedDestroyed
	if err != nil {
		outcome, note = OutcomeFencedFailed, fmt.Sprintf("domain %s on host %s, declared down, is stale (%s); not destroyed: %v", o.Placement.Domain, o.Placement.Host, why, err)
		r.log.Warn("fenced rejoin: a stale copy not destroyed", "machine", m.ID, "host", o.Placement.Host, "err", err)
	}
	r.noteHistory(m, outcome, note)
}
