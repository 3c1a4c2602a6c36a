package migrate

import (
	"fmt"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/recovery"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// A managed migration is driven by this process. If it dies after QEMU
// copied the guest but before the confirm step, libvirt leaves the source
// paused (reason "migration") and lets "higher levels decide"; the
// destination may hold a paused incoming domain, or a running one if the
// finish step had resumed it. The backend's RecoverMigration decides from
// libvirt's state alone which copy is the machine (recovery.Decide), from
// what ReadCopy reads, and leaves exactly one running (Resume).

// ReadCopy reads the state and job of the copy of provider's machineID
// named name on dom into c; the copy must be ours.
func ReadCopy(dom virt.Domain, name, provider, machineID string, c recovery.Copy) (recovery.Copy, error) {
	if _, err := meta.ReadOwned(dom, name, provider, machineID); err != nil {
		return c, err
	}
	var err error
	if c.State, c.Reason, err = dom.GetState(); err != nil {
		return c, fmt.Errorf("state: %w", err)
	}
	ji, err := dom.GetJobInfo()
	switch {
	case virt.IsCode(err, libvirt.ERR_NO_SUPPORT):
		c.Job = false // a driver without jobs (the test driver) has none running
	case err != nil:
		return c, fmt.Errorf("job: %w", err)
	default:
		c.Job = ji.Type != libvirt.DOMAIN_JOB_NONE
	}
	return c, nil
}

// Resume resumes the kept copy on h, read once more: still ours, still
// paused by the migration, no job.
func Resume(h *hostconn.Host, name, provider, machineID string, c recovery.Copy) error {
	return h.WithDomain(name, func(_ virt.Conn, dom virt.Domain) error {
		now, err := ReadCopy(dom, name, provider, machineID, c)
		if err != nil {
			return err
		}
		if now.Job || now.State != libvirt.DOMAIN_PAUSED || now.Reason != int(libvirt.DOMAIN_PAUSED_MIGRATION) {
			return fmt.Errorf("it is now %s: %w", now, recovery.ErrUndecided)
		}
		return dom.Resume()
	})
}
