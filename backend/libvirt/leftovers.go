package libvirt

import (
	"sync"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// A migration that fails removes what it made on the destination (its
// overlay and seed volumes). When the destination drops in the middle
// (its daemon killed, its link cut) that cleanup cannot reach it, and the
// volumes would stay there, owned by no domain, until another migration
// of the same machine to that host or its Delete (the lab soak's orphan).
// The backend remembers them and deletes them after the host's next
// listing that shows no domain of that name, unless a Create of the
// machine is booked there meanwhile (its own volumes may be in the
// making). The memory is this process's: a restart forgets it, as it
// forgets the failed migration.

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
func (b *Backend) sweepLeftovers(h *host, listed []backend.Observed) {
	pending := b.leftover.take(h.name)
	for domain, machineID := range pending {
		if !b.sweepable(h, listed, domain, machineID) {
			b.leftover.add(h.name, domain, machineID)
			continue
		}
		err := h.With(func(conn hostconn.Conn) error {
			if dom, err := conn.LookupDomainByName(domain); err == nil {
				_ = dom.Free()
				return nil // defined since: its volumes are its disks
			} else if !isNoDomain(err) {
				return err
			}
			for _, vol := range []string{meta.OverlayName(domain), meta.SeedName(domain)} {
				if err := b.deleteVolumeIn(conn, vol); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.leftover.add(h.name, domain, machineID)
			b.log.Warn("volumes a failed migration left not deleted yet; tried again after the next listing", "host", h.name,
				"domain", domain, "machine", machineID, "err", err)
			continue
		}
		b.log.Warn("deleted the volumes a failed migration left on its destination", "host", h.name, "domain", domain, "machine", machineID)
	}
}

// sweepable: the listing shows no domain of that name on h and no Create
// of the machine is booked there.
func (b *Backend) sweepable(h *host, listed []backend.Observed, domain, machineID string) bool {
	for _, o := range listed {
		if o.Placement.Domain == domain {
			return false
		}
	}
	at, booked := b.plan.HostOf(h.zone, machineID)
	return !booked || at != h.name
}
