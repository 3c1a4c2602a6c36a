package libvirt

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

var (
	_ backend.HostMaintainer     = (*Backend)(nil)
	_ backend.PlacementReadiness = (*Backend)(nil)
)

// PlacementReady is backend.PlacementReadiness: the placement's host is
// connected (no RPC). A host not known yet answers nil: ZoneReady decides.
func (b *Backend) PlacementReady(pl backend.Placement) error {
	h, err := b.loc.hostOf("", pl.Zone, pl.Host)
	if errors.Is(err, errHostNotKnown) {
		return nil
	}
	if err != nil {
		return err
	}
	return b.loc.ready(h)
}

// locator knows the configured hosts, by zone and by name, their books
// (placement) and which are declared down: it answers where a machine is
// (locate, hostOf), where a new one goes (reserve, book) and whether a
// machine is gone (confirm.go). The hosts are set once, by New.
type locator struct {
	cfg   *Config
	log   *slog.Logger
	zones []string           // in --connect/--hosts order
	hosts map[string]*host   // by host name
	list  []*host            // in --connect/--hosts order
	zoned map[string][]*host // zone → its hosts, in order
	plan  *placement.Planner // capacity, cordon and bookings of every host
	down  downHosts          // hosts declared down (down.go)
}

// zoneReady reports (without an RPC) whether any host of the zone is
// connected: a zone with one host down still serves on the others.
func (l *locator) zoneReady(zone string) error {
	hs, err := l.zoneHosts(zone)
	if err != nil {
		return err
	}
	var first error
	for _, h := range hs {
		if _, down := l.down.reason(h.name); down {
			continue // takes no work: it cannot make the zone ready
		}
		err := h.Ready()
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		// Every host is declared down: no machine can be placed. Calls on
		// a machine of a host declared down are still answered
		// (HostReady: a Delete completes, the rest fail naming it).
		return fmt.Errorf("zone %q: every host is declared down: %w", zone, backend.ErrHostUnavailable)
	}
	return first
}

// zoneHosts returns the hosts of a zone ("" means the only zone, when
// there is one).
func (l *locator) zoneHosts(zone string) ([]*host, error) {
	if zone == "" && len(l.zones) == 1 {
		zone = l.zones[0]
	}
	hs := l.zoned[zone]
	if len(hs) == 0 {
		return nil, fmt.Errorf("zone %q: %w", zone, backend.ErrUnknownZone)
	}
	return hs, nil
}

// host returns the zone's only host, or for a zone of several hosts the
// first: for callers that need some host of the zone (tests, diagnostics).
func (l *locator) host(zone string) (*host, error) {
	hs, err := l.zoneHosts(zone)
	if err != nil {
		return nil, err
	}
	return hs[0], nil
}

// hostOf finds the host holding a machine's domain: the placement's host
// when it names one; else the zone's only host; else, in a zone of several
// hosts, the host the latest listing (or this process's Create) booked
// the machine on. Anything else is "not known", an error wrapping
// backend.ErrHostUnavailable, never a guess: a wrong host would answer
// "no such domain", which the engine could read as the VM being gone.
func (l *locator) hostOf(machineID, zone, name string) (*host, error) {
	hs, err := l.zoneHosts(zone)
	if err != nil {
		return nil, err
	}
	zone = hs[0].zone
	if name != "" {
		h := l.hosts[name]
		if h == nil || h.zone != zone {
			return nil, fmt.Errorf("zone %q: host %q is not configured (--connect/--hosts): %w", zone, name, backend.ErrHostUnavailable)
		}
		return h, nil
	}
	if len(hs) == 1 {
		return hs[0], nil
	}
	if n, ok := l.plan.HostOf(zone, machineID); ok {
		return l.hosts[n], nil
	}
	return nil, fmt.Errorf("zone %q: machine %s: which of the zone's %d hosts holds its domain is not known (not in any listing yet): %w",
		zone, machineID, len(hs), errHostNotKnown)
}

// errHostNotKnown: a machine of a zone of several hosts that no listing
// has seen. It is an ErrHostUnavailable (the engine waits); Delete and
// ConfirmGone ask every host of the zone instead.
var errHostNotKnown = fmt.Errorf("host of the machine not known: %w", backend.ErrHostUnavailable)

// locate names the host and domain of a machine: the placement when the
// engine has one, else the zone given and the derived name.
func (l *locator) locate(machineID string, pl backend.Placement, zone string) (*host, string, error) {
	if pl.Zone != "" {
		zone = pl.Zone
	}
	h, err := l.hostOf(machineID, zone, pl.Host)
	if err != nil {
		return nil, "", err
	}
	name := pl.Domain
	if name == "" {
		name = meta.DomainName(l.cfg.Provider, machineID)
	}
	return h, name, l.isDown(h) // h and name still say where: a Delete completes without a down host
}

// SetCordoned is backend.HostMaintainer: a cordoned host gets no new
// placements; its machines stay where they are.
func (b *Backend) SetCordoned(name string, cordoned bool) error {
	h := b.loc.hosts[name]
	if h == nil {
		return fmt.Errorf("host %q: %w", name, backend.ErrUnknownHost)
	}
	b.loc.plan.Update(name, func(p *placement.Host) { p.Cordoned = cordoned })
	b.log.Info("host cordon changed", "host", name, "zone", h.zone, "cordoned", cordoned)
	return nil
}

// reserve books a host of the zone for a new machine, before any libvirt
// work. A zone none of whose hosts is connected is unavailable (transient:
// the Create waits for a host), not full.
func (l *locator) reserve(spec backend.MachineSpec) (*host, placement.Decision, error) {
	hs, err := l.zoneHosts(spec.Zone)
	if err != nil {
		return nil, placement.Decision{}, err
	}
	if err := l.zoneReady(hs[0].zone); err != nil {
		return nil, placement.Decision{}, err
	}
	d, err := l.plan.Reserve(hs[0].zone, spec.MachineID, l.specSize(spec))
	if err != nil {
		// The last host may have dropped since the check above: that is
		// an outage (the Create waits), not a full zone.
		if rerr := l.zoneReady(hs[0].zone); rerr != nil && errors.Is(err, backend.ErrNoCapacity) {
			return nil, placement.Decision{}, rerr
		}
		return nil, placement.Decision{}, err
	}
	h := l.hosts[d.Host]
	if len(hs) == 1 && !h.enforce {
		d.Why = "" // a zone's only --connect host: no choice was made
	}
	return h, d, nil
}

// refName is the host's name as placements carry it: "" for a zone's only
// --connect host (refs stay "zone/domain").
func (h *host) refName() string {
	if h.named {
		return h.name
	}
	return ""
}
