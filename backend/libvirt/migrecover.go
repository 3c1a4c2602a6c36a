package libvirt

import (
	"context"
	"fmt"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/recovery"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

var _ backend.MigrationRecoverer = (*Backend)(nil)

// A managed migration is driven by this process. If it dies after QEMU
// copied the guest but before the confirm step, libvirt leaves the source
// paused (reason "migration") and lets "higher levels decide"; the
// destination may hold a paused incoming domain, or a running one if the
// finish step had resumed it. RecoverMigration decides from libvirt's
// state alone which copy is the machine, and leaves exactly one running.

// copyState is one copy of the machine as read just before the decision:
// its state and where it is.
type copyState struct {
	recovery.Copy
	pl   backend.Placement
	h    *host
	name string
}

// RecoverMigration is backend.MigrationRecoverer.
func (b *Backend) RecoverMigration(ctx context.Context, machineID string, recorded backend.Placement, copies []backend.Placement) (backend.MigrationRecovery, error) {
	cs, err := b.readCopies(machineID, recorded, copies)
	if err != nil {
		return backend.MigrationRecovery{}, fmt.Errorf("migration recovery: %w", err)
	}
	states := make([]recovery.Copy, len(cs))
	for i, c := range cs {
		states[i] = c.Copy
	}
	plan, err := recovery.Decide(states)
	if err != nil {
		return backend.MigrationRecovery{}, fmt.Errorf("migration recovery: %w", err)
	}
	live := cs[plan.Live]
	out := backend.MigrationRecovery{Live: live.pl, Completed: !live.Recorded, Resumed: plan.Resume}
	// The leftovers go first: the resumed copy is then the only one.
	for _, i := range plan.Remove {
		c := cs[i]
		spec := backend.DeleteSpec{MachineID: machineID, OperationID: "reconcile-migration", Zone: c.pl.Zone, Placement: c.pl}
		if err := b.deleteOn(ctx, c.h, c.name, spec); err != nil {
			return out, fmt.Errorf("migration recovery: remove the copy on host %s: %w", c.pl.Host, err)
		}
		out.Removed = append(out.Removed, c.pl)
	}
	if plan.Resume {
		if err := b.resumeMigrated(live, machineID); err != nil {
			return out, fmt.Errorf("migration recovery: resume on host %s: %w", live.pl.Host, err)
		}
	}
	b.log.Warn("interrupted migration recovered", "zone", live.pl.Zone, "machine", machineID, "domain", live.name,
		"runs_on", live.pl.Host, "completed", out.Completed, "resumed", out.Resumed, "removed", len(out.Removed))
	return out, nil
}

// resumeMigrated resumes the kept copy, read once more: still ours, still
// paused by the migration, no job.
func (b *Backend) resumeMigrated(c copyState, machineID string) error {
	return c.h.WithDomain(c.name, func(_ virt.Conn, dom virt.Domain) error {
		now, err := b.readCopy(dom, c, machineID)
		if err != nil {
			return err
		}
		if now.Job || now.State != libvirt.DOMAIN_PAUSED || now.Reason != int(libvirt.DOMAIN_PAUSED_MIGRATION) {
			return fmt.Errorf("it is now %s: %w", now, recovery.ErrUndecided)
		}
		return dom.Resume()
	})
}

// readCopies reads every copy's state and job; each must be ours.
func (b *Backend) readCopies(machineID string, recorded backend.Placement, copies []backend.Placement) ([]copyState, error) {
	cs := make([]copyState, 0, len(copies))
	for _, pl := range copies {
		h, name, err := b.locate(machineID, pl, "")
		if err != nil {
			return nil, err
		}
		c := copyState{Copy: recovery.Copy{Host: pl.Host, Recorded: pl.Host == recorded.Host}, pl: pl, h: h, name: name}
		if err := h.WithDomain(name, func(_ virt.Conn, dom virt.Domain) error {
			c, err = b.readCopy(dom, c, machineID)
			return err
		}); err != nil {
			return nil, fmt.Errorf("copy on host %s: %w", pl.Host, err)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

func (b *Backend) readCopy(dom virt.Domain, c copyState, machineID string) (copyState, error) {
	if _, err := b.owned(dom, c.name, machineID); err != nil {
		return c, err
	}
	var err error
	if c.State, c.Reason, err = dom.GetState(); err != nil {
		return c, fmt.Errorf("state: %w", err)
	}
	ji, err := dom.GetJobInfo()
	switch {
	case isCode(err, libvirt.ERR_NO_SUPPORT):
		c.Job = false // a driver without jobs (the test driver) has none running
	case err != nil:
		return c, fmt.Errorf("job: %w", err)
	default:
		c.Job = ji.Type != libvirt.DOMAIN_JOB_NONE
	}
	return c, nil
}
