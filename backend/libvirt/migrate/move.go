package migrate

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domxml"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/guestfit"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/rollback"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
)

// End is one host of a migration as the backend located it: its
// connection and the names it goes by.
type End struct {
	*hostconn.Host
	Zone string
	Name string          // the host's stable name
	Ref  string          // the host's name as placements carry it ("" for a zone's only --connect host)
	Fit  *guestfit.Cache // what its QEMU offers a migrated guest (dest.go)
}

// Mover runs migrations for one backend: what it needs of the backend's
// configuration, and nothing of the backend itself.
type Mover struct {
	Provider string       // whose domains it moves (meta.ReadOwned)
	Store    volume.Store // the pool on both hosts, the golden image, the seed's user data
	Plain    bool         // --migrate-tls=false
	// Policy is a Create's definition policy for hostType with the zero
	// shape and no files (the destination's is built on it).
	Policy func(hostType string) domxml.Policy
	Log    *slog.Logger
}

// Base flags: keep the guest running throughout, define it on the
// destination and remove the source's definition once it runs there.
const baseFlags = libvirt.MIGRATE_LIVE | libvirt.MIGRATE_PERSIST_DEST | libvirt.MIGRATE_UNDEFINE_SOURCE

// Flags are the base flags with TLS (QEMU's migration and NBD streams)
// unless plain (--migrate-tls=false): a host without /etc/pki/qemu
// certificates then refuses the migration with libvirt's own error, and
// the VM stays put.
func Flags(plain bool) libvirt.DomainMigrateFlags {
	if plain {
		return baseFlags
	}
	return baseFlags | libvirt.MIGRATE_TLS
}

// StorageMode names how the disk travelled, for the log.
func StorageMode(f libvirt.DomainMigrateFlags) string {
	if f&libvirt.MIGRATE_NON_SHARED_INC != 0 {
		return "overlay copied (golden image on both hosts)"
	}
	return "whole disk copied"
}

// Move does the libvirt work on both connections: it checks the domain,
// prepares the destination's volumes, migrates, and cleans up on either
// side. It returns the migration flags used, and leftover when a failed
// attempt could not remove all it made on the destination (the backend's
// listing sweeps it later).
func (mv *Mover) Move(ctx context.Context, src, dst End, name, machineID string) (flags libvirt.DomainMigrateFlags, leftover bool, err error) {
	err = src.With(func(sconn virt.Conn) error {
		return dst.With(func(dconn virt.Conn) error {
			dom, err := sconn.LookupDomainByName(name)
			if err != nil {
				return fmt.Errorf("migrate: look up domain %s on host %s: %w", name, src.Name, err)
			}
			defer dom.Free()
			m := &migration{mv: mv, ctx: ctx, src: src, dst: dst, sconn: sconn, dconn: dconn, dom: dom, name: name, machineID: machineID}
			err = m.run()
			flags = m.flags
			if err != nil {
				if rerr := m.undo.Run(mv.Log.With("domain", name, "host", dst.Name)); rerr != nil {
					err = fmt.Errorf("%w (destination cleanup incomplete: %v)", err, rerr)
					leftover = true
				}
			}
			return err
		})
	})
	return flags, leftover, err
}

// migration is one attempt: its handles, its flags and what it made on the
// destination (undo, run if it fails).
type migration struct {
	mv         *Mover
	ctx        context.Context
	src, dst   End
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
	md, err := meta.ReadOwned(m.dom, m.name, m.mv.Provider, m.machineID)
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
		return fmt.Errorf("migrate: host %s already has a domain named %s (a leftover of an earlier attempt?); remove it first", m.dst.Name, m.name)
	} else if !isNoDomain(err) {
		return fmt.Errorf("migrate: look up %s on host %s: %w", m.name, m.dst.Name, err)
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
	md.Host = m.dst.Ref
	mdXML, err := meta.Stamped(md).Marshal(true)
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
	if m.ctx.Err() != nil {
		return fmt.Errorf("migrate: not started: %w", context.Cause(m.ctx))
	}
	if err := m.call(destXML); err != nil {
		if err := m.afterError(err); err != nil {
			return err
		}
	}
	m.undo = rollback.Stack{} // the domain runs on the destination: its volumes are its disks now
	for _, v := range m.srcVolumes {
		if err := m.mv.Store.DeleteIn(m.sconn, v); err != nil {
			m.mv.Log.Warn("migrated, but the source's volume was not deleted", "host", m.src.Name, "volume", v, "err", err)
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
		m.mv.Log.Warn("migration reported an error, but the domain runs on the destination and no longer on the source: done",
			"domain", m.name, "from", m.src.Name, "to", m.dst.Name, "err", err)
		if _, _, err := m.dom.GetState(); !isNoDomain(err) {
			m.srcVolumes = nil // the source's definition still names them
		}
		return nil
	}
	return fmt.Errorf("%w; the domain is also defined on host %s, so its volumes there are kept", err, m.dst.Name)
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
				m.mv.Log.Warn("migration deadline: aborting the job failed", "domain", m.name, "err", err)
			}
		case <-done:
		}
	}()
	moved, err := m.sconn.Migrate3(m.dom, m.dconn, params, Flags(m.mv.Plain)|m.flags)
	close(done)
	if err != nil {
		if m.ctx.Err() != nil {
			err = fmt.Errorf("%w (aborted: %v)", err, context.Cause(m.ctx))
		}
		return fmt.Errorf("migrate %s from host %s to host %s: %w", m.name, m.src.Name, m.dst.Name, err)
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
	spool, err := m.sconn.LookupStoragePoolByName(m.mv.Store.Pool)
	if err != nil {
		return nil, fmt.Errorf("migrate: storage pool %s on host %s: %w", m.mv.Store.Pool, m.src.Name, err)
	}
	defer spool.Free()
	dpool, err := m.dconn.LookupStoragePoolByName(m.mv.Store.Pool)
	if err != nil {
		return nil, fmt.Errorf("migrate: storage pool %s on host %s: %w", m.mv.Store.Pool, m.dst.Name, err)
	}
	defer dpool.Free()
	ovName := meta.OverlayName(m.name)
	srcOverlay, capacity, err := volume.PathSize(spool, ovName)
	if err != nil {
		return nil, fmt.Errorf("migrate: overlay on host %s: %w", m.src.Name, err)
	}
	m.srcVolumes = append(m.srcVolumes, ovName)
	disks := map[string]string{}
	if err := m.clearLeftover(dpool, ovName); err != nil {
		return nil, err
	}
	m.undo.Push("delete destination overlay", func() error { return m.mv.Store.DeleteIn(m.dconn, ovName) })
	if g, why := volume.SameGolden(spool, dpool, m.mv.Store.Golden, ovName); why == "" {
		m.flags = libvirt.MIGRATE_NON_SHARED_INC
		path, _, err := volume.EnsureOverlay(dpool, ovName, g)
		if err != nil {
			return nil, fmt.Errorf("migrate: overlay on host %s: %w", m.dst.Name, err)
		}
		disks[srcOverlay] = path
	} else {
		m.flags = libvirt.MIGRATE_NON_SHARED_DISK
		m.mv.Log.Info("migration copies the whole disk", "domain", m.name, "from", m.src.Name, "to", m.dst.Name, "why", why)
		path, err := volume.CreatePlain(dpool, ovName, capacity)
		if err != nil {
			return nil, fmt.Errorf("migrate: volume on host %s (%s): %w", m.dst.Name, why, err)
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
		return fmt.Errorf("migrate: seed on host %s: %w", m.src.Name, err)
	}
	m.srcVolumes = append(m.srcVolumes, sName)
	if m.mv.Store.UserData == "" {
		return fmt.Errorf("migrate: domain %s has a seed volume but --base-user-data is not set to rebuild it on host %s", m.name, m.dst.Name)
	}
	if err := m.clearLeftover(dpool, sName); err != nil {
		return err
	}
	m.undo.Push("delete destination seed", func() error { return m.mv.Store.DeleteIn(m.dconn, sName) })
	path, err := m.mv.Store.EnsureSeed(m.dconn, dpool, sName, m.name, &rollback.Stack{})
	if err != nil {
		return fmt.Errorf("migrate: seed on host %s: %w", m.dst.Name, err)
	}
	disks[srcSeed] = path
	return nil
}
