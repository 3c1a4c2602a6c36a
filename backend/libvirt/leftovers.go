package libvirt

import (
	"strings"
	"sync"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// A migration that fails removes what it made on the destination (its
// overlay and seed volumes); one that succeeds removes the source's. When
// a host drops in the middle (its daemon killed, its link cut), or the
// provider dies between libvirt's handover and that step, the volumes stay
// there, owned by no domain, until another migration of the same machine
// to that host or its Delete (the lab soak's orphans). So after each
// listing of a host, the volumes of a machine the zone books on another
// host (placement.Planner.Elsewhere: not booked here, no migration in
// flight here), with no domain of that name here, are remembered, as are
// those a failed cleanup reported; they are deleted once checked again
// (no domain of that name, nothing booked here), never a volume of a
// domain that exists. Remembered ones a restart forgets are found again
// by the next listing.

// leftovers are, per host, the domains whose migration volumes a failed
// cleanup left, with their machine.
type leftovers struct {
	mu     sync.Mutex
	byHost map[string]map[string]string // host → domain → machine
}

func (l *leftovers) add(host, domain, machineID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byHost == nil {
		l.byHost = map[string]map[string]string{}
	}
	if l.byHost[host] == nil {
		l.byHost[host] = map[string]string{}
	}
	l.byHost[host][domain] = machineID
}

// take removes and returns host's entries.
func (l *leftovers) take(host string) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.byHost[host]
	delete(l.byHost, host)
	return out
}

// sweepLeftovers deletes, after a successful listing of h (listed), the
// volumes failed migrations left there; an entry it cannot settle now is
// kept for the next listing.
func (l *lister) sweepLeftovers(h *host, listed []backend.Observed) {
	pending := l.leftover.take(h.name)
	for domain, machineID := range pending {
		if !l.sweepable(h, listed, domain, machineID) {
			l.leftover.add(h.name, domain, machineID)
			continue
		}
		err := h.With(func(conn virt.Conn) error {
			if dom, err := conn.LookupDomainByName(domain); err == nil {
				_ = dom.Free()
				return nil // defined since: its volumes are its disks
			} else if !isNoDomain(err) {
				return err
			}
			for _, vol := range []string{meta.OverlayName(domain), meta.SeedName(domain)} {
				if err := l.store.DeleteIn(conn, vol); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			l.leftover.add(h.name, domain, machineID)
			l.log.Warn("volumes a failed migration left not deleted yet; tried again after the next listing", "host", h.name,
				"domain", domain, "machine", machineID, "err", err)
			continue
		}
		l.log.Warn("deleted the volumes a failed migration left on its destination", "host", h.name, "domain", domain, "machine", machineID)
	}
}

// sweepable: the listing shows no domain of that name on h and no Create
// of the machine is booked there.
func (l *lister) sweepable(h *host, listed []backend.Observed, domain, machineID string) bool {
	for _, o := range listed {
		if o.Placement.Domain == domain {
			return false
		}
	}
	return l.plan.NotHere(h.zone, h.name, machineID)
}

// findLeftovers remembers the volumes on h of machines the zone books on
// another host, whose domain is not on h (see above).
func (l *lister) findLeftovers(h *host, listed []backend.Observed, vols []string) {
	prefix := meta.NamePrefix(l.cfg.Provider)
	have := map[string]bool{}
	for _, v := range vols {
		if strings.HasPrefix(v, prefix) {
			have[v] = true
		}
	}
	for _, o := range listed {
		delete(have, meta.OverlayName(o.Placement.Domain))
		delete(have, meta.SeedName(o.Placement.Domain))
	}
	if len(have) == 0 {
		return // every volume of ours here is a listed domain's: the usual case
	}
	for id := range l.plan.Elsewhere(h.zone, h.name) {
		name := meta.DomainName(l.cfg.Provider, id)
		if have[meta.OverlayName(name)] || have[meta.SeedName(name)] {
			l.leftover.add(h.name, name, id)
		}
	}
}
