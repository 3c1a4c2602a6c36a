package migrate

import (
	"fmt"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
)

// clearLeftover deletes a volume named name that an earlier, interrupted
// migration left in the destination's pool, so the destination's disks are
// always made fresh here. Reusing one would be silent disk corruption: with
// NON_SHARED_INC QEMU mirrors only the blocks the source's overlay holds,
// so any block the old attempt wrote and the source's overlay does not
// hold would survive under the guest. It is safe to delete because run has
// already refused a destination with a domain of this machine's name, the
// only domain whose volumes these names are (they derive from it); it is
// checked again here, next to the deletion, so the rule holds on its own.
func (m *migration) clearLeftover(dpool virt.Pool, name string) error {
	if _, _, err := volume.PathSize(dpool, name); isNoVolume(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("migrate: leftover check on host %s: %w", m.dst.Name, err)
	}
	if other, err := m.dconn.LookupDomainByName(m.name); err == nil {
		_ = other.Free()
		return fmt.Errorf("migrate: host %s has a domain named %s using volume %s: refusing to touch it (a copy for reconcile to judge)", m.dst.Name, m.name, name)
	} else if !isNoDomain(err) {
		return fmt.Errorf("migrate: look up %s on host %s: %w", m.name, m.dst.Name, err)
	}
	if err := volume.Delete(dpool, name, m.mv.Store.Golden); err != nil {
		return fmt.Errorf("migrate: delete leftover volume %s on host %s: %w", name, m.dst.Name, err)
	}
	m.mv.Log.Warn("deleted a volume an earlier migration left on the destination; it is made fresh",
		"host", m.dst.Name, "volume", name, "domain", m.name, "machine", m.machineID)
	return nil
}
