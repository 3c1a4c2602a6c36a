package fake

import (
	"fmt"
	"maps"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// SetFailure makes op fail with err for machineID ("" = every machine;
// for OpInventory the id is a zone). A nil err clears the entry.
func (b *Backend) SetFailure(op, machineID string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		delete(b.failures, failKey{op, machineID})
		return
	}
	b.failures[failKey{op, machineID}] = err
}

// ClearFailures removes every failure set with SetFailure.
func (b *Backend) ClearFailures() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.failures)
}

// SetHang makes op block until its ctx is done, to exercise timeouts.
func (b *Backend) SetHang(op string, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hang[op] = on
}

// SetDelay sets the simulated duration of op (overriding Options.Delay).
func (b *Backend) SetDelay(op string, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.delays == nil {
		b.delays = map[string]time.Duration{}
	}
	b.delays[op] = d
}

// SetZoneDown makes a zone's host unreachable (down) or reachable again.
// While down, operations there fail with backend.ErrHostUnavailable and
// Inventory reports the zone's Err.
func (b *Backend) SetZoneDown(zone string, down bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if down {
		b.down[zone] = backend.ErrHostUnavailable
	} else {
		delete(b.down, zone)
	}
}

// Vanish removes a VM behind the engine's back, as an operator running
// "virsh undefine" would, and reports whether it existed.
func (b *Backend) Vanish(machineID string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.vms[machineID]
	delete(b.vms, machineID)
	return ok
}

// SetRunState changes a VM's run state behind the engine's back, as
// "virsh destroy" (shutoff, destroyed), a killed QEMU (shutoff, crashed) or
// "virsh suspend" (paused, user) would, and reports whether it existed.
// Running follows rs.Up().
func (b *Backend) SetRunState(machineID string, rs backend.RunState) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	vm, ok := b.vms[machineID]
	if ok {
		vm.Running, vm.Run = rs.Up(), rs
	}
	return ok
}

// VM returns a copy of a machine's VM.
func (b *Backend) VM(machineID string) (VM, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	vm, ok := b.vms[machineID]
	if !ok {
		return VM{}, false
	}
	c := *vm
	if vm.Binding != nil {
		bc := *vm.Binding
		bc.ShardMetadata = maps.Clone(vm.Binding.ShardMetadata)
		c.Binding = &bc
	}
	if vm.Bootstrap != nil {
		bt := *vm.Bootstrap
		c.Bootstrap = &bt
	}
	if vm.ConfigureIntent != nil {
		ci := *vm.ConfigureIntent
		ci.ShardMetadata = maps.Clone(ci.ShardMetadata)
		c.ConfigureIntent = &ci
	}
	return c, true
}

// Binding returns the cluster binding Configure recorded, if any.
func (b *Backend) Binding(machineID string) (Binding, bool) {
	vm, ok := b.VM(machineID)
	if !ok || vm.Binding == nil {
		return Binding{}, false
	}
	return *vm.Binding, true
}

// BlobDigest is the hex sha256 of the last blob delivered to a machine, or
// "" when it has no binding; compare with Digest(blob).
func (b *Backend) BlobDigest(machineID string) string {
	bd, ok := b.Binding(machineID)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%x", bd.BlobDigest)
}

// Len is the number of VMs.
func (b *Backend) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.vms)
}

// Calls counts how often op was invoked (including failed attempts).
func (b *Backend) Calls(op string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[op]
}

// Restore puts back a VM that existed before a provider restart. The fake
// keeps its VMs in memory, while real hosts keep running when the provider
// dies; the wiring restores one VM per machine the state file says has one,
// so a SIGKILL'd fake provider comes back to the same world instead of
// seeing every VM "vanish".
func (b *Backend) Restore(vm VM) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := vm
	if vm.Binding != nil {
		bc := *vm.Binding
		bc.ShardMetadata = maps.Clone(vm.Binding.ShardMetadata)
		c.Binding = &bc
	}
	b.vms[vm.MachineID] = &c
	b.bookLocked(&c)
}
