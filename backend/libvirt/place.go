package libvirt

import (
	"context"
	"errors"
	"fmt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

var _ backend.Placer = (*Backend)(nil)

// Place is backend.Placer: it books a host of the zone for the machine
// (a machine already booked keeps its host) and touches no host. The
// engine records the placement with the CREATING machine before Create.
func (b *Backend) Place(spec backend.MachineSpec) (backend.Placement, error) {
	h, dec, err := b.loc.reserve(spec)
	if err != nil {
		return backend.Placement{}, b.loc.placeErr(spec, err)
	}
	return backend.Placement{Zone: h.zone, Host: h.refName(), Domain: meta.DomainName(b.cfg.Provider, spec.MachineID), Why: dec.Why}, nil
}

// Unplace is backend.Placer: it drops a reservation that no Create
// attempt used (an observed machine stays booked where it is).
func (b *Backend) Unplace(zone, machineID string) {
	hs, err := b.loc.zoneHosts(zone)
	if err != nil {
		return
	}
	b.loc.plan.Release(hs[0].zone, machineID)
}

// book finds the host a Create works on: the one recorded by an earlier
// attempt (spec.Host) whatever its room or cordon, since the domain may
// already be there; else a fresh choice of the planner.
func (l *locator) book(ctx context.Context, spec backend.MachineSpec) (*host, placement.Decision, error) {
	if spec.Host == "" {
		h, dec, err := l.reserve(spec)
		return h, dec, l.placeErr(spec, err)
	}
	hs, err := l.zoneHosts(spec.Zone)
	if err != nil {
		return nil, placement.Decision{}, fmt.Errorf("create: %w", err)
	}
	zone := hs[0].zone
	if h := l.hosts[spec.Host]; h == nil || h.zone != zone {
		if n, ok := l.plan.HostOf(zone, spec.MachineID); ok {
			return l.hosts[n], placement.Decision{Host: n}, nil // a listing found its domain there
		}
		return nil, placement.Decision{}, l.recordedHostGone(ctx, spec, zone)
	}
	dec, err := l.plan.Pin(zone, spec.Host, spec.MachineID, l.specSize(spec))
	if err != nil {
		return nil, placement.Decision{}, fmt.Errorf("create: %w", err)
	}
	return l.hosts[dec.Host], dec, nil
}

// recordedHostGone: the recorded host left the configuration. The Create
// may be placed again only once every host of the zone answered that the
// machine has no domain (backend.ErrPlacementGone); anything else keeps
// it waiting, as a host outage does.
func (l *locator) recordedHostGone(ctx context.Context, spec backend.MachineSpec, zone string) error {
	gone, err := l.confirmEverywhere(ctx, spec.MachineID, backend.Placement{Zone: zone})
	switch {
	case err != nil:
		return fmt.Errorf("create: recorded host %q is no longer configured, and not every host of zone %s answered: %w", spec.Host, zone, err)
	case !gone:
		return fmt.Errorf("create: recorded host %q is no longer configured, and a host of zone %s holds the domain but no listing has placed it yet: %w",
			spec.Host, zone, backend.ErrHostUnavailable)
	}
	return fmt.Errorf("create: host %q of zone %s: %w", spec.Host, zone, backend.ErrPlacementGone)
}

// placeErr words a refused placement; a full zone is also a WARN line.
func (l *locator) placeErr(spec backend.MachineSpec, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, backend.ErrNoCapacity) && backend.IsTransient(err):
		// A migration in flight gives back room that fits: the engine
		// tries again, and the refusal is no operator's concern yet.
		l.log.Info("create waits: no room until a migration in flight ends", "zone", spec.Zone, "machine", spec.MachineID,
			"op", spec.OperationID, "vcpu", spec.VCPU, "memory_mib", spec.MemoryMiB, "err", err)
		return err
	case errors.Is(err, backend.ErrNoCapacity):
		// last_error reads "create failed: zone z: no host fits ...".
		l.log.Warn("create refused: no host of the zone has room", "zone", spec.Zone, "machine", spec.MachineID,
			"op", spec.OperationID, "vcpu", spec.VCPU, "memory_mib", spec.MemoryMiB, "err", err)
		return err
	}
	return fmt.Errorf("create: %w", err)
}

// specSize is what a machine is booked at: its type's huge pages too.
func (l *locator) specSize(spec backend.MachineSpec) placement.Size {
	return placement.Size{VCPUs: max(spec.VCPU, 1), MemoryMiB: int64(max(spec.MemoryMiB, 64)),
		HugePageKiB: l.cfg.Shapes[spec.InstanceType].HugePageKiB}
}
