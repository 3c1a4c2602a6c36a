package migrate

import (
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/domxml"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
)

// A migration defines a domain on the destination from the source's
// migratable XML. That XML is libvirt's rendering of whatever is defined
// on the source now, which anyone with domain.write there could have
// redefined since our Create checked it; so it goes through the same
// allow-list as a Create (Policy.CheckRendered), twice: as the source has it,
// before any work on the destination, and as the destination will get it.

// migratePolicy is the policy of the destination's domain: a Create's
// (network, boot files) with the destination's domain type and default
// emulator, and files as its only disks.
func (m *migration) migratePolicy(files ...string) (domxml.Policy, error) {
	em, err := domxml.DefaultEmulator(m.dconn, m.dst.DomainType().Type)
	if err != nil {
		return domxml.Policy{}, fmt.Errorf("migrate: capabilities of host %s: %w", m.dst.Name, err)
	}
	// The zero shape: a shaped domain (UEFI, TPM, huge pages, a CPU of
	// its own, other NICs) is not migrated (its rendering is refused).
	p := m.mv.Policy(m.dst.DomainType().Type)
	p.Files, p.Emulator = nil, em
	for _, f := range files {
		if f != "" {
			p.Files = append(p.Files, f)
		}
	}
	return p, nil
}

// checkSource checks the source's migratable XML with the source's own
// volumes as the allowed disks, and the overlay's backing file as the
// allowed backing chain.
func (m *migration) checkSource(srcXML string) error {
	spool, err := m.sconn.LookupStoragePoolByName(m.mv.Store.Pool)
	if err != nil {
		return fmt.Errorf("migrate: storage pool %s on host %s: %w", m.mv.Store.Pool, m.src.Name, err)
	}
	defer spool.Free()
	var files []string
	for _, v := range []string{meta.OverlayName(m.name), meta.SeedName(m.name)} {
		if path, _, err := volume.PathSize(spool, v); err == nil {
			files = append(files, path)
		} else if !isNoVolume(err) {
			return fmt.Errorf("migrate: volume on host %s: %w", m.src.Name, err)
		}
	}
	backing, err := volume.BackingPath(spool, meta.OverlayName(m.name))
	if err != nil && !isNoVolume(err) {
		return fmt.Errorf("migrate: volume on host %s: %w", m.src.Name, err)
	}
	return m.checkXML(srcXML, backing, files...)
}

// checkXML applies the migration's policy to x; backing ("" for none) is
// the one file its disks' backing chains may name.
func (m *migration) checkXML(x, backing string, files ...string) error {
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		return fmt.Errorf("migrate: parse domain XML: %w", err)
	}
	p, err := m.migratePolicy(files...)
	if err != nil {
		return err
	}
	if backing != "" {
		p.Backing = []string{backing}
	}
	if err := p.CheckRendered(&d); err != nil {
		if domxml.Shaped(&d) {
			return fmt.Errorf("migrate %s to host %s: a machine with a UEFI, TPM, huge page or CPU shape is not live-migrated: %w", m.name, m.dst.Name, err)
		}
		return fmt.Errorf("migrate %s to host %s: %w", m.name, m.dst.Name, err)
	}
	return nil
}
