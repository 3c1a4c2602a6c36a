package libvirt

import (
	"context"
	"fmt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/migrate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/recovery"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

var _ backend.MigrationRecoverer = (*Backend)(nil)

// RecoverMigration finishes a migration this process was cut in: see
// backend/libvirt/migrate/recover.go for what libvirt leaves and
// backend/libvirt/recovery for the decision.

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
	cs, err := b.loc.readCopies(machineID, recorded, copies)
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
		if err := b.remover.deleteOn(ctx, c.h, c.name, spec); err != nil {
			return out, fmt.Errorf("migration recovery: remove the copy on host %s: %w", c.pl.Host, err)
		}
		out.Removed = append(out.Removed, c.pl)
	}
	if plan.Resume {
		if err := migrate.Resume(live.h.Host, live.name, b.cfg.Provider, machineID, live.Copy); err != nil {
			return out, fmt.Errorf("migration recovery: resume on host %s: %w", live.pl.Host, err)
		}
	}
	b.log.Warn("interrupted migration recovered", "zone", live.pl.Zone, "machine", machineID, "domain", live.name,
		"runs_on", live.pl.Host, "completed", out.Completed, "resumed", out.Resumed, "removed", len(out.Removed))
	return out, nil
}

// readCopies reads every copy's state and job; each must be ours.
func (l *locator) readCopies(machineID string, recorded backend.Placement, copies []backend.Placement) ([]copyState, error) {
	cs := make([]copyState, 0, len(copies))
	for _, pl := range copies {
		h, name, err := l.locate(machineID, pl, "")
		if err != nil {
			return nil, err
		}
		c := copyState{Copy: recovery.Copy{Host: pl.Host, Recorded: pl.Host == recorded.Host}, pl: pl, h: h, name: name}
		if err := h.WithDomain(name, func(_ virt.Conn, dom virt.Domain) error {
			c.Copy, err = migrate.ReadCopy(dom, name, l.cfg.Provider, machineID, c.Copy)
			return err
		}); err != nil {
			return nil, fmt.Errorf("copy on host %s: %w", pl.Host, err)
		}
		cs = append(cs, c)
	}
	return cs, nil
}
