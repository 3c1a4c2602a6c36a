package fake

import (
	"context"
	"fmt"
	"maps"

	"github.com/bigfleet/libvirt-provider/backend"
)

var _ backend.ConfigureProber = (*Backend)(nil)

// BootstrapTrace is what a VM's guest keeps of the bootstrap hook of its
// last Configure: the fake's Configure takes effect at its end, so it
// records HookSucceeded there, and a Configure cut before (during its
// delay) leaves none, as a hook that never started. SetBootstrapTrace
// plays the other cases.
type BootstrapTrace struct {
	OperationID string
	Trace       backend.ConfigureTrace
}

// SetBootstrapTrace sets what the machine's guest shows of the bootstrap
// hook of operation op.
func (b *Backend) SetBootstrapTrace(machineID, op string, tr backend.ConfigureTrace) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	vm, ok := b.vms[machineID]
	if !ok {
		return fmt.Errorf("fake: machine %q: %w", machineID, backend.ErrNotFound)
	}
	vm.Bootstrap = &BootstrapTrace{OperationID: op, Trace: tr}
	return nil
}

// ProbeConfigure answers from the VM's trace: only the trace of
// spec.OperationID counts. A VM that is gone answers ErrNotFound (after a
// restart of a provider serving the fake, every VM is), one not running
// or on a host that is down an error: it cannot be asked.
func (b *Backend) ProbeConfigure(_ context.Context, spec backend.ConfigureSpec) (backend.ConfigureTrace, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	vm, err := b.runningLocked(spec.MachineID, spec.Placement)
	if err != nil {
		return backend.ConfigureTrace{}, fmt.Errorf("probe configure: %w", err)
	}
	if vm.Bootstrap == nil || vm.Bootstrap.OperationID != spec.OperationID {
		return backend.ConfigureTrace{Hook: backend.HookNeverStarted}, nil
	}
	return vm.Bootstrap.Trace, nil
}

// FinishConfigure records the binding of a Configure whose hook finished
// ok; it refuses one whose trace does not say so (the engine must never
// finish a Configure the guest did not finish).
func (b *Backend) FinishConfigure(_ context.Context, spec backend.ConfigureSpec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	vm, err := b.runningLocked(spec.MachineID, spec.Placement)
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	if vm.Bootstrap == nil || vm.Bootstrap.OperationID != spec.OperationID || vm.Bootstrap.Trace.Hook != backend.HookSucceeded {
		return fmt.Errorf("fake: configure %s: its bootstrap hook did not finish ok", spec.OperationID)
	}
	bd := Binding{ClusterID: spec.ClusterID, OperationID: spec.OperationID, ShardMetadata: maps.Clone(spec.ShardMetadata)}
	if vm.Binding != nil && vm.Binding.OperationID == spec.OperationID {
		bd.BlobDigest, bd.BlobLen = vm.Binding.BlobDigest, vm.Binding.BlobLen
	}
	vm.Binding = &bd
	vm.ConfigureIntent = nil
	return nil
}

// RollBackConfigure removes the intent of Configure spec.OperationID from
// the machine's VM (another operation's is left alone).
func (b *Backend) RollBackConfigure(_ context.Context, spec backend.ConfigureSpec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	vm, err := b.vmLocked(spec.MachineID, spec.Placement)
	if err != nil {
		return fmt.Errorf("roll back configure: %w", err)
	}
	if vm.ConfigureIntent != nil && vm.ConfigureIntent.OperationID == spec.OperationID {
		vm.ConfigureIntent = nil
	}
	return nil
}
