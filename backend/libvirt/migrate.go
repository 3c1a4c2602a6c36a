package libvirt

import (
	"context"
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/migrate"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

var _ backend.Migrator = (*Backend)(nil)

// Migrate is backend.Migrator: a managed live migration (virDomainMigrate3
// from the source's connection to the destination's, both held by this
// process with their own credentials, so hosts need not trust each other).
// The destination is booked before any libvirt work, exactly as for a
// Create; the booking is released if the migration fails, and the source's
// once it succeeds. See docs/pools.md "Live migration".
func (b *Backend) Migrate(ctx context.Context, spec backend.MigrateSpec) (backend.Placement, error) {
	src, name, err := b.loc.locate(spec.MachineID, spec.Placement, spec.Placement.Zone)
	if err != nil {
		return backend.Placement{}, fmt.Errorf("migrate: %w", err)
	}
	size := placement.Size{VCPUs: max(spec.VCPU, 1), MemoryMiB: int64(max(spec.MemoryMiB, 64))}
	dec, err := b.reserveDestination(src, name, spec.MachineID, spec.ToHost, size)
	if err != nil {
		return backend.Placement{}, fmt.Errorf("migrate: %w", err)
	}
	dst := b.loc.hosts[dec.Host]
	start := time.Now()
	flags, leftover, err := b.mover.Move(ctx, src.end(), dst.end(), name, spec.MachineID)
	if leftover {
		b.leftover.add(dst.name, name, spec.MachineID) // leftovers.go
	}
	if err != nil {
		b.loc.plan.FinishMove(src.zone, spec.MachineID, dst.name, false)
		b.log.Warn("migration failed; the domain stays on its host", "zone", src.zone, "domain", name,
			"machine", spec.MachineID, "from", src.name, "to", dst.name, "err", err)
		return backend.Placement{}, err
	}
	b.loc.plan.FinishMove(src.zone, spec.MachineID, dst.name, true)
	b.log.Info("domain migrated", "zone", src.zone, "domain", name, "machine", spec.MachineID, "from", src.name,
		"to", dst.name, "storage", migrate.StorageMode(flags), "placement", dec.Why, "took", time.Since(start).Round(time.Millisecond).String())
	return backend.Placement{Zone: dst.zone, Host: dst.refName(), Domain: name, Why: dec.Why}, nil
}

// A live migration's destination must be able to run the guest as it runs
// now: its exact machine type (a domain defined on QEMU 10 is
// pc-i440fx-10.0, which QEMU 7.2 lacks) and its CPU. Placement cannot know
// that, so the hosts that cannot are ruled out before it chooses, each
// with its reason, which a refusal then names (issue 38 item 7).

// reserveDestination books the migration's destination (as
// placement.ReserveMoveAmong) among the hosts of the source's zone whose
// QEMU can run the domain name; to, if set, is the only candidate.
func (b *Backend) reserveDestination(src *host, name, machineID, to string, size placement.Size) (placement.Decision, error) {
	g, err := migrate.GuestOn(src.end(), name)
	if err != nil {
		return placement.Decision{}, err
	}
	var candidates []migrate.End
	for _, h := range b.loc.list {
		if h.zone == src.zone && h != src && (to == "" || h.name == to) && h.Ready() == nil {
			candidates = append(candidates, h.end())
		}
	}
	refused := b.mover.Refused(src.zone, candidates, g)
	if len(refused) > 0 {
		b.log.Info("migration: hosts that cannot run the guest are ruled out", "zone", src.zone, "domain", name,
			"machine", machineID, "guest", g.String(), "ruled_out", refused)
	}
	return b.loc.plan.ReserveMoveAmong(src.zone, machineID, src.name, to, size, refused)
}

// end is h as one end of a migration.
func (h *host) end() migrate.End {
	return migrate.End{Host: h.Host, Zone: h.zone, Name: h.name, Ref: h.refName(), Fit: &h.fit}
}
