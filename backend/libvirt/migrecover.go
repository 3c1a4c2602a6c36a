package libvirt

import (
	"context"
	"errors"
	"fmt"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
)

var _ backend.MigrationRecoverer = (*Backend)(nil)

// A managed migration is driven by this process. If it dies after QEMU
// copied the guest but before the confirm step, libvirt leaves the source
// paused (reason "migration") and lets "higher levels decide"; the
// destination may hold a paused incoming domain, or a running one if the
// finish step had resumed it. RecoverMigration decides from libvirt's
// state alone which copy is the machine, and leaves exactly one running.

// copyState is one copy of the machine as read just before the decision.
type copyState struct {
	pl       backend.Placement
	h        *host
	name     string
	st       libvirt.DomainState
	reason   int
	job      bool // a libvirt job (a migration still under way) is active
	recorded bool // on the host the machine's record names
}

func (c copyState) up() bool { return c.st == libvirt.DOMAIN_RUNNING || c.st == libvirt.DOMAIN_BLOCKED }

// migrationLeftover: a copy a migration left behind: paused by it (the
// source after the copy; an incoming destination that was never resumed,
// "starting up" on some releases) or shut off as migrated.
func (c copyState) migrationLeftover() bool {
	switch c.st {
	case libvirt.DOMAIN_PAUSED:
		return c.reason == int(libvirt.DOMAIN_PAUSED_MIGRATION) || c.reason == int(libvirt.DOMAIN_PAUSED_STARTING_UP)
	case libvirt.DOMAIN_SHUTOFF:
		return c.reason == int(libvirt.DOMAIN_SHUTOFF_MIGRATED)
	}
	return false
}

func (c copyState) String() string {
	return fmt.Sprintf("host %s: %s", c.pl.Host, domstate.Run(c.st, c.reason))
}

// recoveryPlan: which copy is the machine, whether it must be resumed,
// and which copies go.
type recoveryPlan struct {
	live   int
	resume bool
	remove []int
}

var errUndecided = errors.New("libvirt's state does not prove which copy is the machine; nothing changed")

// planRecovery is the decision, from the copies' states only. A copy
// that runs is the machine (the guest's state moved there, or never
// left); with none running, the recorded copy paused by the migration is
// (the destination never ran the guest). Every other copy must be a
// migration's leftover to be removed.
func planRecovery(cs []copyState) (recoveryPlan, error) {
	p, rec := recoveryPlan{live: -1}, -1
	for i, c := range cs {
		if c.job {
			return p, fmt.Errorf("a job is still active on %s: %w", c, errUndecided)
		}
		if c.up() {
			if p.live >= 0 {
				return p, fmt.Errorf("two copies run (%s, %s): %w", cs[p.live], c, errUndecided)
			}
			p.live = i
		}
		if c.recorded {
			rec = i
		}
	}
	if p.live < 0 {
		if rec < 0 || cs[rec].st != libvirt.DOMAIN_PAUSED || cs[rec].reason != int(libvirt.DOMAIN_PAUSED_MIGRATION) {
			return p, fmt.Errorf("no copy runs and the recorded host's copy is not paused by a migration: %w", errUndecided)
		}
		p.live, p.resume = rec, true
	}
	for i, c := range cs {
		if i == p.live {
			continue
		}
		if !c.migrationLeftover() {
			return p, fmt.Errorf("the copy on %s is not a migration's leftover: %w", c, errUndecided)
		}
		p.remove = append(p.remove, i)
	}
	return p, nil
}

// RecoverMigration is backend.MigrationRecoverer.
func (b *Backend) RecoverMigration(ctx context.Context, machineID string, recorded backend.Placement, copies []backend.Placement) (backend.MigrationRecovery, error) {
	cs, err := b.readCopies(machineID, recorded, copies)
	if err != nil {
		return backend.MigrationRecovery{}, fmt.Errorf("migration recovery: %w", err)
	}
	plan, err := planRecovery(cs)
	if err != nil {
		return backend.MigrationRecovery{}, fmt.Errorf("migration recovery: %w", err)
	}
	live := cs[plan.live]
	out := backend.MigrationRecovery{Live: live.pl, Completed: !live.recorded, Resumed: plan.resume}
	// The leftovers go first: the resumed copy is then the only one.
	for _, i := range plan.remove {
		c := cs[i]
		spec := backend.DeleteSpec{MachineID: machineID, OperationID: "reconcile-migration", Zone: c.pl.Zone, Placement: c.pl}
		if err := b.deleteOn(ctx, c.h, c.name, spec); err != nil {
			return out, fmt.Errorf("migration recovery: remove the copy on host %s: %w", c.pl.Host, err)
		}
		out.Removed = append(out.Removed, c.pl)
	}
	if plan.resume {
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
	return c.h.WithDomain(c.name, func(_ hostconn.Conn, dom hostconn.Domain) error {
		now, err := b.readCopy(dom, c, machineID)
		if err != nil {
			return err
		}
		if now.job || now.st != libvirt.DOMAIN_PAUSED || now.reason != int(libvirt.DOMAIN_PAUSED_MIGRATION) {
			return fmt.Errorf("it is now %s: %w", now, errUndecided)
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
		c := copyState{pl: pl, h: h, name: name, recorded: pl.Host == recorded.Host}
		if err := h.WithDomain(name, func(_ hostconn.Conn, dom hostconn.Domain) error {
			c, err = b.readCopy(dom, c, machineID)
			return err
		}); err != nil {
			return nil, fmt.Errorf("copy on host %s: %w", pl.Host, err)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

func (b *Backend) readCopy(dom hostconn.Domain, c copyState, machineID string) (copyState, error) {
	if _, err := b.owned(dom, c.name, machineID); err != nil {
		return c, err
	}
	var err error
	if c.st, c.reason, err = dom.GetState(); err != nil {
		return c, fmt.Errorf("state: %w", err)
	}
	ji, err := dom.GetJobInfo()
	switch {
	case isCode(err, libvirt.ERR_NO_SUPPORT):
		c.job = false // a driver without jobs (the test driver) has none running
	case err != nil:
		return c, fmt.Errorf("job: %w", err)
	default:
		c.job = ji.Type != libvirt.DOMAIN_JOB_NONE
	}
	return c, nil
}
