package fake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

// Host is one simulated hypervisor of a zone (from a --hosts file). A fake
// built with Hosts places each Create on one of its zone's hosts through
// the placement planner, with the host's size and overcommit enforced.
type Host struct {
	Name             string
	Zone             string
	Labels           map[string]string
	VCPUs            int
	MemoryMiB        int64
	PoolGiB          int64
	CPUOvercommit    float64
	MemoryOvercommit float64
	Cordoned         bool
}

var (
	_ backend.HostMaintainer     = (*Backend)(nil)
	_ backend.HostDownDeclarer   = (*Backend)(nil)
	_ backend.Confirmer          = (*Backend)(nil)
	_ backend.PlacementReadiness = (*Backend)(nil)
)

// PlacementReady: the placement's host is up (and its zone served).
func (b *Backend) PlacementReady(p backend.Placement) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hostErrLocked(p)
}

// initHosts sets up the planner for opts.Hosts; zones follow the hosts.
func (b *Backend) initHosts(opts Options) error {
	b.planner = placement.New(opts.Policy)
	b.hostList = slices.Clone(opts.Hosts)
	b.zones = nil
	b.zoneHosts, b.zoneDown = map[string]int{}, map[string]int{}
	for _, h := range opts.Hosts {
		b.zoneHosts[h.Zone]++
		if !slices.Contains(b.zones, h.Zone) {
			b.zones = append(b.zones, h.Zone)
		}
		err := b.planner.AddHost(placement.Host{Name: h.Name, Zone: h.Zone, Enforce: true,
			VCPUs: h.VCPUs, MemoryMiB: h.MemoryMiB, CPUOvercommit: h.CPUOvercommit, MemoryOvercommit: h.MemoryOvercommit,
			PoolFreeBytes: uint64(h.PoolGiB) << 30, PoolKnown: true, Connected: true, Cordoned: h.Cordoned})
		if err != nil {
			return err
		}
	}
	return nil
}

// multiHost reports whether the fake was built with Hosts.
func (b *Backend) multiHost() bool { return b.planner != nil }

// SetHostDown makes one host unreachable (down) or reachable again. A zone
// stays ready while any of its hosts is up; the machines of a down host
// fail their operations with backend.ErrHostUnavailable and are left out
// of the zone's listing (and ConfirmGone answers "not known" for them).
func (b *Backend) SetHostDown(name string, down bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	zone := ""
	for _, h := range b.hostList {
		if h.Name == name {
			zone = h.Zone
		}
	}
	switch {
	case down && !b.hostDown[name]:
		b.hostDown[name] = true
		b.zoneDown[zone]++
	case !down && b.hostDown[name]:
		delete(b.hostDown, name)
		b.zoneDown[zone]--
	}
	b.planner.Update(name, func(h *placement.Host) { h.Connected = !down })
}

// SetDown declares a host down or ends the declaration. The fake keeps a
// declared host out of placement and reports it in Hosts; it does not
// model the rest (listings, fencing a host that answers again).
func (b *Backend) SetDown(name string, down bool, reason string) error {
	if !b.multiHost() {
		return fmt.Errorf("fake: host %q: %w", name, backend.ErrUnknownHost)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.planner.Update(name, func(h *placement.Host) { h.Down = down }) {
		return fmt.Errorf("fake: host %q: %w", name, backend.ErrUnknownHost)
	}
	if down {
		b.declared[name] = reason
	} else {
		delete(b.declared, name)
	}
	return nil
}

// SetCordoned cordons or uncordons a host: no new placements go there.
func (b *Backend) SetCordoned(name string, cordoned bool) error {
	if !b.multiHost() {
		return fmt.Errorf("fake: host %q: %w", name, backend.ErrUnknownHost)
	}
	if !b.planner.Update(name, func(h *placement.Host) { h.Cordoned = cordoned }) {
		return fmt.Errorf("fake: host %q: %w", name, backend.ErrUnknownHost)
	}
	return nil
}

// hostErrLocked: the placement's host cannot be reached.
func (b *Backend) hostErrLocked(p backend.Placement) error {
	if err := b.zoneErrLocked(p.Zone); err != nil {
		return err
	}
	if p.Host != "" && b.hostDown[p.Host] {
		return fmt.Errorf("fake: host %q of zone %q is down: %w", p.Host, p.Zone, backend.ErrHostUnavailable)
	}
	return nil
}

// zoneHostsDownLocked: every host of a multi-host zone is down.
func (b *Backend) zoneHostsDownLocked(zone string) bool {
	return b.multiHost() && b.zoneDown[zone] == b.zoneHosts[zone]
}

// bookLocked tells the planner a VM is on its host (the fake has no
// inventory drift, so its books are kept by each Create, Restore and
// Delete instead of by listings).
func (b *Backend) bookLocked(vm *VM) {
	if b.multiHost() && vm.Placement.Host != "" {
		b.planner.Book(vm.Placement.Host, vm.MachineID, placement.Size{VCPUs: vm.VCPU, MemoryMiB: int64(vm.MemoryMiB)})
	}
}

// unbookLocked: the VM is gone.
func (b *Backend) unbookLocked(p backend.Placement, machineID string) {
	if b.multiHost() {
		b.planner.Forget(p.Zone, machineID)
	}
}

// place reserves a host for a new machine (before any work, so
// concurrent Creates never oversubscribe a host).
func (b *Backend) place(spec backend.MachineSpec) (placement.Decision, error) {
	return b.planner.Reserve(spec.Zone, spec.MachineID,
		placement.Size{VCPUs: spec.VCPU, MemoryMiB: int64(spec.MemoryMiB)})
}

// hostStatuses reports each host of a multi-host fake.
func (b *Backend) hostStatusesLocked() []backend.HostStatus {
	out := make([]backend.HostStatus, 0, len(b.hostList))
	for _, fh := range b.hostList {
		ph, used, _ := b.planner.Get(fh.Name)
		st := backend.HostStatus{Name: fh.Name, Labels: maps.Clone(fh.Labels), Cordoned: ph.Cordoned,
			Zone: fh.Zone, URI: "fake://" + fh.Name, Connected: true,
			LibvirtVersion: "fake", HypervisorVersion: "fake", DomainType: "fake",
			PoolCapacity: uint64(fh.PoolGiB) << 30,
			Capacity: backend.HostCapacity{VCPUs: fh.VCPUs, MemoryMiB: fh.MemoryMiB, PoolFreeBytes: ph.PoolFreeBytes,
				CPUOvercommit: ratio(fh.CPUOvercommit), MemoryOvercommit: ratio(fh.MemoryOvercommit),
				UsedVCPUs: used.VCPUs, UsedMemoryMiB: used.MemoryMiB, Machines: used.Machines}}
		st.Capacity.FreeMemoryMiB = max(fh.MemoryMiB-used.MemoryMiB, 0)
		st.DownReason, st.Down = b.declared[fh.Name]
		if err := b.hostErrLocked(backend.Placement{Zone: fh.Zone, Host: fh.Name}); err != nil {
			st.Connected, st.LastError = false, err.Error()
		}
		for _, vm := range b.vms {
			if vm.Placement.Host == fh.Name {
				st.DomainCount++
			}
		}
		out = append(out, st)
	}
	return out
}

func ratio(r float64) float64 {
	if r <= 0 {
		return 1
	}
	return r
}

// ConfirmGone: gone only when the fake has no VM for the machine; a VM on
// a host that is down is "not known" (an error), as on a real host.
func (b *Backend) ConfirmGone(_ context.Context, machineID string, p backend.Placement) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	vm, ok := b.vms[machineID]
	if !ok {
		if err := b.hostErrLocked(p); err != nil {
			return false, err
		}
		return true, nil
	}
	if err := b.hostErrLocked(vm.Placement); err != nil {
		return false, err
	}
	return false, nil
}

// errHostsDown is the zone error of a multi-host zone whose hosts are all down.
var errHostsDown = errors.New("every host of the zone is down")

// createOnHost is Create in multi-host mode: the host is reserved first,
// the work done after, and the reservation released if the work fails.
func (b *Backend) createOnHost(ctx context.Context, spec backend.MachineSpec) (backend.Placement, error) {
	b.mu.Lock()
	if err := b.zoneErrLocked(spec.Zone); err != nil {
		b.mu.Unlock()
		return backend.Placement{}, err
	}
	b.finishBegunDeleteLocked(spec.MachineID)
	vm, exists := b.vms[spec.MachineID]
	b.mu.Unlock()
	if exists { // a retried Create adopts its VM where it is
		if err := b.begin(ctx, OpCreate, spec.MachineID); err != nil {
			return backend.Placement{}, err
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if err := b.hostErrLocked(vm.Placement); err != nil {
			return backend.Placement{}, err
		}
		vm.Running, vm.Run = true, backend.RunState{}
		return vm.Placement, nil
	}
	dec, err := b.place(spec)
	if err != nil {
		return backend.Placement{}, fmt.Errorf("fake: %w", err)
	}
	if err := b.begin(ctx, OpCreate, spec.MachineID); err != nil {
		if !backend.IsTransient(err) { // as libvirt: a link fault keeps the host for the retry
			b.planner.Release(spec.Zone, spec.MachineID)
		}
		return backend.Placement{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p := backend.Placement{Zone: spec.Zone, Host: dec.Host, Domain: DomainName(spec.MachineID)}
	if err := b.hostErrLocked(p); err != nil {
		b.planner.Release(spec.Zone, spec.MachineID)
		return backend.Placement{}, err
	}
	// The reservation stays as the VM's booking until its Delete.
	b.vms[spec.MachineID] = &VM{MachineID: spec.MachineID, OperationID: spec.OperationID, Placement: p,
		InstanceType: spec.InstanceType, VCPU: spec.VCPU, MemoryMiB: spec.MemoryMiB, Running: true}
	p.Why = dec.Why
	return p, nil
}
