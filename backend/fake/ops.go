package fake

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// begin is the common prologue of an operation: count it, wait out its
// delay (or hang) honouring ctx, then consult the injected failures. It
// runs without the lock so slow operations on different machines overlap
// as they would on real hosts.
func (b *Backend) begin(ctx context.Context, op, id string) error {
	b.mu.Lock()
	b.calls[op]++
	d, hang := b.delayLocked(op), b.hang[op]
	b.mu.Unlock()
	if err := wait(ctx, d, hang); err != nil {
		return err
	}
	b.mu.Lock()
	err := b.failures[failKey{op, id}]
	if err == nil {
		err = b.failures[failKey{op, ""}]
	}
	b.mu.Unlock()
	if err == nil && b.fail != nil {
		err = b.fail(op, id)
	}
	return err
}

func (b *Backend) delayLocked(op string) time.Duration {
	if d, ok := b.delays[op]; ok {
		return d
	}
	return b.delay
}

func wait(ctx context.Context, d time.Duration, hang bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Create records a running VM, or adopts the one this machine already has
// (a retried Create after a restart must not build a second one).
func (b *Backend) Create(ctx context.Context, spec backend.MachineSpec) (backend.Placement, error) {
	if spec.MachineID == "" {
		return backend.Placement{}, errors.New("fake: create: empty machine id")
	}
	if b.multiHost() {
		return b.createOnHost(ctx, spec)
	}
	if err := b.begin(ctx, OpCreate, spec.MachineID); err != nil {
		return backend.Placement{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.zoneErrLocked(spec.Zone); err != nil {
		return backend.Placement{}, err
	}
	if vm, ok := b.vms[spec.MachineID]; ok && vm.DeleteOperationID == "" {
		vm.Running, vm.Run = true, backend.RunState{}
		return vm.Placement, nil
	}
	b.finishBegunDeleteLocked(spec.MachineID)
	p := backend.Placement{Zone: spec.Zone, Domain: DomainName(spec.MachineID)}
	b.vms[spec.MachineID] = &VM{MachineID: spec.MachineID, OperationID: spec.OperationID, Placement: p,
		InstanceType: spec.InstanceType, VCPU: spec.VCPU, MemoryMiB: spec.MemoryMiB, Running: true}
	return p, nil
}

// Configure records the Configure's intent on the VM, then (after its
// delay and injected failures) the cluster binding and a digest of the
// blob, removing the intent.
func (b *Backend) Configure(ctx context.Context, spec backend.ConfigureSpec) error {
	b.recordIntent(spec)
	if err := b.begin(ctx, OpConfigure, spec.MachineID); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	vm, err := b.vmLocked(spec.MachineID, spec.Placement)
	if err != nil {
		return err
	}
	if runOf(vm).Inactive() {
		// As the libvirt backend does: a Configure starts an IDLE
		// machine's stopped domain, as the next reconcile would.
		vm.Running, vm.Run = true, backend.RunState{State: backend.RunRunning, Reason: "booted"}
	}
	if vm, err = b.runningLocked(spec.MachineID, spec.Placement); err != nil {
		return err
	}
	vm.Binding = &Binding{ClusterID: spec.ClusterID, OperationID: spec.OperationID,
		BlobDigest: sha256.Sum256(spec.BootstrapBlob), BlobLen: len(spec.BootstrapBlob),
		ShardMetadata: maps.Clone(spec.ShardMetadata)}
	vm.Bootstrap = &BootstrapTrace{OperationID: spec.OperationID, Trace: backend.ConfigureTrace{Hook: backend.HookSucceeded}}
	vm.ConfigureIntent = nil
	return nil
}

// recordIntent writes the Configure's intent on the machine's VM, as the
// libvirt backend does before the bootstrap hook may start; a VM that is
// missing, on a host that is down or being deleted gets none.
func (b *Backend) recordIntent(spec backend.ConfigureSpec) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if vm, err := b.vmLocked(spec.MachineID, spec.Placement); err == nil && vm.DeleteOperationID == "" {
		vm.ConfigureIntent = &backend.ConfigureIntent{OperationID: spec.OperationID, ClusterID: spec.ClusterID,
			ShardMetadata: maps.Clone(spec.ShardMetadata)}
	}
}

// Drain clears the binding; draining an unbound VM is a no-op.
func (b *Backend) Drain(ctx context.Context, spec backend.DrainSpec) error {
	if err := b.begin(ctx, OpDrain, spec.MachineID); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	vm, err := b.runningLocked(spec.MachineID, spec.Placement)
	if err != nil {
		return err
	}
	vm.Binding = nil
	return nil
}

// finishBegunDeleteLocked removes the machine's VM if it carries a
// Delete's intent, as the libvirt backend does before a Create: a VM a
// Delete began on is never adopted.
func (b *Backend) finishBegunDeleteLocked(id string) {
	if vm, ok := b.vms[id]; ok && vm.DeleteOperationID != "" {
		delete(b.vms, id)
		b.unbookLocked(vm.Placement, id)
	}
}

// Delete removes the VM; an already missing VM is success. As the libvirt
// backend does, it first records its intent on the VM; a failure set for
// OpDeleteCut stops it there.
func (b *Backend) Delete(ctx context.Context, spec backend.DeleteSpec) error {
	if err := b.begin(ctx, OpDelete, spec.MachineID); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	zone := spec.Placement.Zone
	if zone == "" {
		zone = spec.Zone
	}
	pl := backend.Placement{Zone: zone}
	if vm, ok := b.vms[spec.MachineID]; ok {
		pl = vm.Placement
	}
	if pl.Zone != "" {
		if err := b.hostErrLocked(pl); err != nil {
			return err
		}
	}
	if vm, ok := b.vms[spec.MachineID]; ok {
		vm.DeleteOperationID = cmp.Or(spec.OperationID, "unknown")
		if err := b.failures[failKey{OpDeleteCut, spec.MachineID}]; err != nil {
			return err
		}
		if err := b.failures[failKey{OpDeleteCut, ""}]; err != nil {
			return err
		}
	}
	delete(b.vms, spec.MachineID)
	b.unbookLocked(pl, spec.MachineID)
	return nil
}

// vmLocked finds a live VM of the machine in a reachable zone. A placement
// naming another domain means the engine's record and the VM disagree,
// which a real host would report as not found.
func (b *Backend) vmLocked(id string, p backend.Placement) (*VM, error) {
	vm, ok := b.vms[id]
	if !ok || (p.Domain != "" && p.Domain != vm.Placement.Domain) {
		return nil, fmt.Errorf("fake: machine %q: %w", id, backend.ErrNotFound)
	}
	if err := b.hostErrLocked(vm.Placement); err != nil {
		return nil, err
	}
	return vm, nil
}

// runningLocked is vmLocked for the operations that need the guest: a VM
// that is not running fails at once, as the libvirt backend does, instead
// of waiting for an agent that cannot answer.
func (b *Backend) runningLocked(id string, p backend.Placement) (*VM, error) {
	vm, err := b.vmLocked(id, p)
	if err != nil {
		return nil, err
	}
	if !vm.Running {
		return nil, fmt.Errorf("fake: domain %s is %s: %w", vm.Placement.Domain, runOf(vm), backend.ErrNotRunning)
	}
	return vm, nil
}

// Start runs a stopped VM again; a running one is left as it is.
func (b *Backend) Start(ctx context.Context, machineID string, p backend.Placement) error {
	if err := b.begin(ctx, OpStart, machineID); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	vm, err := b.vmLocked(machineID, p)
	if err != nil {
		return err
	}
	vm.Running, vm.Run = true, backend.RunState{State: backend.RunRunning, Reason: "booted"}
	return nil
}

// Inventory lists the VMs per zone, sorted by machine id. A zone that is
// down, failed by injection, or cut off by ctx reports Err and no machines.
func (b *Backend) Inventory(ctx context.Context) []backend.ZoneInventory {
	out := make([]backend.ZoneInventory, 0, len(b.zones))
	for _, z := range b.zones {
		out = append(out, b.inventoryZone(ctx, z))
	}
	return out
}

func (b *Backend) listZone(zone string) ([]backend.Observed, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.zoneErrLocked(zone); err != nil {
		return nil, err
	}
	var out []backend.Observed
	for _, vm := range b.vms {
		// A down host's VMs are not listed: ConfirmGone keeps them.
		if vm.Placement.Zone == zone && !b.hostDown[vm.Placement.Host] {
			out = append(out, observe(vm))
		}
	}
	slices.SortFunc(out, func(a, c backend.Observed) int { return strings.Compare(a.MachineID, c.MachineID) })
	return out, nil
}

func observe(vm *VM) backend.Observed {
	o := backend.Observed{MachineID: vm.MachineID, OperationID: vm.OperationID,
		Placement: vm.Placement, Running: vm.Running, Run: runOf(vm), DeleteOperationID: vm.DeleteOperationID}
	if vm.Binding != nil {
		o.ClusterID = vm.Binding.ClusterID
		o.ShardMetadata = maps.Clone(vm.Binding.ShardMetadata)
	}
	if c := vm.ConfigureIntent; c != nil {
		o.Configure = backend.ConfigureIntent{OperationID: c.OperationID, ClusterID: c.ClusterID, ShardMetadata: maps.Clone(c.ShardMetadata)}
	}
	return o
}

// Digest is the hex sha256 of a blob, to compare with BlobDigest.
func Digest(blob []byte) string { return fmt.Sprintf("%x", sha256.Sum256(blob)) }

// runOf is the VM's run state: what SetRunState set, else running or shut
// off by Running alone.
func runOf(vm *VM) backend.RunState {
	switch {
	case vm.Run.State != "":
		return vm.Run
	case vm.Running:
		return backend.RunState{State: backend.RunRunning, Reason: "booted"}
	}
	return backend.RunState{State: backend.RunShutoff, Reason: "unknown"}
}
