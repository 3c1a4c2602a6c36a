package libvirt

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domxml"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/rollback"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
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
	src, name, err := b.locate(spec.MachineID, spec.Placement, spec.Placement.Zone)
	if err != nil {
		return backend.Placement{}, fmt.Errorf("migrate: %w", err)
	}
	size := placement.Size{VCPUs: max(spec.VCPU, 1), MemoryMiB: int64(max(spec.MemoryMiB, 64))}
	dec, err := b.reserveDestination(src, name, spec.MachineID, spec.ToHost, size)
	if err != nil {
		return backend.Placement{}, fmt.Errorf("migrate: %w", err)
	}
	dst := b.hosts[dec.Host]
	start := time.Now()
	flags, err := b.migrateTo(ctx, src, dst, name, spec.MachineID)
	if err != nil {
		b.plan.FinishMove(src.zone, spec.MachineID, dst.name, false)
		b.log.Warn("migration failed; the domain stays on its host", "zone", src.zone, "domain", name,
			"machine", spec.MachineID, "from", src.name, "to", dst.name, "err", err)
		return backend.Placement{}, err
	}
	b.plan.FinishMove(src.zone, spec.MachineID, dst.name, true)
	b.log.Info("domain migrated", "zone", src.zone, "domain", name, "machine", spec.MachineID, "from", src.name,
		"to", dst.name, "storage", storageMode(flags), "placement", dec.Why, "took", time.Since(start).Round(time.Millisecond).String())
	return backend.Placement{Zone: dst.zone, Host: dst.refName(), Domain: name, Why: dec.Why}, nil
}

// Base flags: keep the guest running throughout, define it on the
// destination and remove the source's definition once it runs there.
const migrateFlags = libvirt.MIGRATE_LIVE | libvirt.MIGRATE_PERSIST_DEST | libvirt.MIGRATE_UNDEFINE_SOURCE

// migrateFlags adds TLS (QEMU's migration and NBD streams) unless
// --migrate-tls=false: a host without /etc/pki/qemu certificates then
// refuses the migration with libvirt's own error, and the VM stays put.
func (b *Backend) migrateFlags() libvirt.DomainMigrateFlags {
	if b.cfg.MigratePlain {
		return migrateFlags
	}
	return migrateFlags | libvirt.MIGRATE_TLS
}

func storageMode(f libvirt.DomainMigrateFlags) string {
	if f&libvirt.MIGRATE_NON_SHARED_INC != 0 {
		return "overlay copied (golden image on both hosts)"
	}
	return "whole disk copied"
}

// migrateTo does the libvirt work on both connections: it checks the
// domain, prepares the destination's volumes, migrates, and cleans up on
// either side. It returns the migration flags used.
func (b *Backend) migrateTo(ctx context.Context, src, dst *host, name, machineID string) (libvirt.DomainMigrateFlags, error) {
	var flags libvirt.DomainMigrateFlags
	err := src.With(func(sconn virt.Conn) error {
		return dst.With(func(dconn virt.Conn) error {
			dom, err := sconn.LookupDomainByName(name)
			if err != nil {
				return fmt.Errorf("migrate: look up domain %s on host %s: %w", name, src.name, err)
			}
			defer dom.Free()
			m := &migration{b: b, ctx: ctx, src: src, dst: dst, sconn: sconn, dconn: dconn, dom: dom, name: name, machineID: machineID}
			err = m.run()
			flags = m.flags
			if err != nil {
				if rerr := m.undo.Run(b.log.With("domain", name, "host", dst.name)); rerr != nil {
					err = fmt.Errorf("%w (destination cleanup incomplete: %v)", err, rerr)
					b.leftover.add(dst.name, name, machineID) // leftovers.go
				}
			}
			return err
		})
	})
	return flags, err
}

// migration is one attempt: its handles, its flags and what it made on the
// destination (undo, run if it fails).
type migration struct {
	b          *Backend
	ctx        context.Context
	src, dst   *host
	sconn      virt.Conn
	dconn      virt.Conn
	dom        virt.Domain
	name       string
	machineID  string
	flags      libvirt.DomainMigrateFlags
	undo       rollback.Stack
	srcVolumes []string // the source's volumes, deleted once the domain left
}

func (m *migration) run() error {
	md, err := m.b.owned(m.dom, m.name, m.machineID)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if st, reason, err := m.dom.GetState(); err != nil {
		return fmt.Errorf("migrate: state of %s: %w", m.name, err)
	} else if st != libvirt.DOMAIN_RUNNING {
		return fmt.Errorf("migrate: domain %s is %s: %w", m.name, domstate.Describe(st, reason), backend.ErrNotRunning)
	}
	if other, err := m.dconn.LookupDomainByName(m.name); err == nil {
		_ = other.Free()
		return fmt.Errorf("migrate: host %s already has a domain named %s (a leftover of an earlier attempt?); remove it first", m.dst.name, m.name)
	} else if !isNoDomain(err) {
		return fmt.Errorf("migrate: look up %s on host %s: %w", m.name, m.dst.name, err)
	}
	srcXML, err := m.dom.GetXMLDesc(libvirt.DOMAIN_XML_MIGRATABLE)
	if err != nil {
		return fmt.Errorf("migrate: migratable XML of %s: %w", m.name, err)
	}
	if err := m.checkSource(srcXML); err != nil {
		return err
	}
	disks, err := m.prepareVolumes()
	if err != nil {
		return err
	}
	md.Host = m.dst.refName()
	mdXML, err := md.Marshal(true)
	if err != nil {
		return err
	}
	destXML, err := domxml.DestXML(srcXML, disks, mdXML, m.dst.DomainType().Type)
	if err != nil {
		return fmt.Errorf("migrate: destination XML: %w", err)
	}
	if err := m.checkXML(destXML, "", slices.Collect(maps.Values(disks))...); err != nil {
		return err
	}
	if err := m.ctx.Err(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := m.call(destXML); err != nil {
		if err := m.afterError(err); err != nil {
			return err
		}
	}
	m.undo = rollback.Stack{} // the domain runs on the destination: its volumes are its disks now
	for _, v := range m.srcVolumes {
		if err := m.b.deleteVolumeIn(m.sconn, v); err != nil {
			m.b.log.Warn("migrated, but the source's volume was not deleted", "host", m.src.name, "volume", v, "err", err)
		}
	}
	return nil
}

// afterError decides what a failed call left. Normally libvirt aborted and
// the guest runs on the source: the destination's volumes go. But a call
// can fail after the guest started on the destination (a confirm step
// lost): then the domain is there and its volumes must stay.
func (m *migration) afterError(err error) error {
	dom, lerr := m.dconn.LookupDomainByName(m.name)
	if lerr != nil {
		return err
	}
	defer dom.Free()
	m.undo = rollback.Stack{}
	st, _, serr := dom.GetState()
	if serr == nil && st == libvirt.DOMAIN_RUNNING && !m.sourceRunning() {
		m.b.log.Warn("migration reported an error, but the domain runs on the destination and no longer on the source: done",
			"domain", m.name, "from", m.src.name, "to", m.dst.name, "err", err)
		if _, _, err := m.dom.GetState(); !isNoDomain(err) {
			m.srcVolumes = nil // the source's definition still names them
		}
		return nil
	}
	return fmt.Errorf("%w; the domain is also defined on host %s, so its volumes there are kept", err, m.dst.name)
}

// sourceRunning: unknown counts as running (never judge a move done on
// an error), a domain gone from the source as not.
func (m *migration) sourceRunning() bool {
	st, _, err := m.dom.GetState()
	if err != nil {
		return !isNoDomain(err)
	}
	return st == libvirt.DOMAIN_RUNNING
}

// call runs virDomainMigrate3. It cannot take a context, so when ctx ends
// first the source's migration job is aborted, which makes the call fail
// with the guest still running on the source.
func (m *migration) call(destXML string) error {
	params := &libvirt.DomainMigrateParameters{DestXMLSet: true, DestXML: destXML}
	done := make(chan struct{})
	go func() {
		select {
		case <-m.ctx.Done():
			if err := m.dom.AbortJob(); err != nil {
				m.b.log.Warn("migration deadline: aborting the job failed", "domain", m.name, "err", err)
			}
		case <-done:
		}
	}()
	moved, err := m.sconn.Migrate3(m.dom, m.dconn, params, m.b.migrateFlags()|m.flags)
	close(done)
	if err != nil {
		if cerr := m.ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w (aborted: %v)", err, cerr)
		}
		return fmt.Errorf("migrate %s from host %s to host %s: %w", m.name, m.src.name, m.dst.name, err)
	}
	_ = moved.Free()
	return nil
}

// prepareVolumes creates, in the destination's pool, a volume of the same
// name for each of the domain's volumes in the source's pool, and chooses
// the storage flag: with the golden image on the destination too, the
// overlay is made on it and only the overlay's own blocks are copied
// (NON_SHARED_INC); otherwise the whole disk is copied into a plain
// volume (NON_SHARED_DISK). The read-only seed is not copied by libvirt
// (it mirrors writable disks only), so it is built and uploaded again: its
// content depends only on --base-user-data and the domain name. It returns
// the source path → destination path of each disk.
func (m *migration) prepareVolumes() (map[string]string, error) {
	spool, err := m.sconn.LookupStoragePoolByName(m.b.cfg.Pool)
	if err != nil {
		return nil, fmt.Errorf("migrate: storage pool %s on host %s: %w", m.b.cfg.Pool, m.src.name, err)
	}
	defer spool.Free()
	dpool, err := m.dconn.LookupStoragePoolByName(m.b.cfg.Pool)
	if err != nil {
		return nil, fmt.Errorf("migrate: storage pool %s on host %s: %w", m.b.cfg.Pool, m.dst.name, err)
	}
	defer dpool.Free()
	ovName := meta.OverlayName(m.name)
	srcOverlay, capacity, err := volume.PathSize(spool, ovName)
	if err != nil {
		return nil, fmt.Errorf("migrate: overlay on host %s: %w", m.src.name, err)
	}
	m.srcVolumes = append(m.srcVolumes, ovName)
	disks := map[string]string{}
	if err := m.clearLeftover(dpool, ovName); err != nil {
		return nil, err
	}
	m.undo.Push("delete destination overlay", func() error { return m.b.deleteVolumeIn(m.dconn, ovName) })
	if g, why := volume.SameGolden(spool, dpool, m.b.cfg.Image, ovName); why == "" {
		m.flags = libvirt.MIGRATE_NON_SHARED_INC
		path, _, err := volume.EnsureOverlay(dpool, ovName, g)
		if err != nil {
			return nil, fmt.Errorf("migrate: overlay on host %s: %w", m.dst.name, err)
		}
		disks[srcOverlay] = path
	} else {
		m.flags = libvirt.MIGRATE_NON_SHARED_DISK
		m.b.log.Info("migration copies the whole disk", "domain", m.name, "from", m.src.name, "to", m.dst.name, "why", why)
		path, err := volume.CreatePlain(dpool, ovName, capacity)
		if err != nil {
			return nil, fmt.Errorf("migrate: volume on host %s (%s): %w", m.dst.name, why, err)
		}
		disks[srcOverlay] = path
	}
	if err := m.prepareSeed(spool, dpool, disks); err != nil {
		return nil, err
	}
	return disks, nil
}

// prepareSeed recreates the NoCloud seed on the destination when the
// source has one.
func (m *migration) prepareSeed(spool, dpool virt.Pool, disks map[string]string) error {
	sName := meta.SeedName(m.name)
	srcSeed, _, err := volume.PathSize(spool, sName)
	if isNoVolume(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("migrate: seed on host %s: %w", m.src.name, err)
	}
	m.srcVolumes = append(m.srcVolumes, sName)
	if m.b.cfg.BaseUserData == "" {
		return fmt.Errorf("migrate: domain %s has a seed volume but --base-user-data is not set to rebuild it on host %s", m.name, m.dst.name)
	}
	if err := m.clearLeftover(dpool, sName); err != nil {
		return err
	}
	m.undo.Push("delete destination seed", func() error { return m.b.deleteVolumeIn(m.dconn, sName) })
	path, err := m.b.ensureSeed(m.dconn, dpool, m.name, &rollback.Stack{})
	if err != nil {
		return fmt.Errorf("migrate: seed on host %s: %w", m.dst.name, err)
	}
	disks[srcSeed] = path
	return nil
}
