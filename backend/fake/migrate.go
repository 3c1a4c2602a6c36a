package fake

import (
	"context"
	"fmt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

var _ backend.Migrator = (*Backend)(nil)

// Migrate moves a running VM to another host of its zone, as the libvirt
// backend does: the destination is booked first (by the zone's placement,
// or the named host, which must fit), the work (OpMigrate's delay and
// injected failure) runs after, and a failure leaves the VM where it was
// with the destination's booking released.
func (b *Backend) Migrate(ctx context.Context, spec backend.MigrateSpec) (backend.Placement, error) {
	if !b.multiHost() {
		return backend.Placement{}, fmt.Errorf("fake: zone %q has a single host: %w", spec.Placement.Zone, backend.ErrNoCapacity)
	}
	b.mu.Lock()
	vm, err := b.runningLocked(spec.MachineID, spec.Placement)
	if err != nil {
		b.mu.Unlock()
		return backend.Placement{}, fmt.Errorf("fake: migrate: %w", err)
	}
	src := vm.Placement
	b.mu.Unlock()
	dec, err := b.planner.ReserveMove(src.Zone, spec.MachineID, src.Host, spec.ToHost,
		placement.Size{VCPUs: vm.VCPU, MemoryMiB: int64(vm.MemoryMiB)})
	if err != nil {
		return backend.Placement{}, fmt.Errorf("fake: migrate: %w", err)
	}
	dst := backend.Placement{Zone: src.Zone, Host: dec.Host, Domain: src.Domain}
	if err := b.begin(ctx, OpMigrate, spec.MachineID); err != nil {
		b.planner.FinishMove(src.Zone, spec.MachineID, dec.Host, false)
		return backend.Placement{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.hostErrLocked(dst); err != nil {
		b.planner.FinishMove(src.Zone, spec.MachineID, dec.Host, false)
		return backend.Placement{}, fmt.Errorf("fake: migrate to %s: %w", dec.Host, err)
	}
	vm.Placement = dst
	b.planner.FinishMove(src.Zone, spec.MachineID, dec.Host, true)
	dst.Why = dec.Why
	return dst, nil
}
