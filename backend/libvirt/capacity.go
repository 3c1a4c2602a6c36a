package libvirt

import (
	"maps"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

// toPlanner hands a reading of the host's size to placement
// (hostconn.Config.OnSize).
func (h *host) toPlanner(sz hostconn.Size) {
	h.plan.Update(h.name, func(p *placement.Host) {
		p.VCPUs, p.MemoryMiB, p.PoolFreeBytes, p.PoolKnown = sz.VCPUs, sz.MemoryMiB, sz.PoolFreeBytes, sz.PoolKnown
		p.HugePagesFreeKiB = nil
		for size, hp := range sz.HugePages {
			if hp.FreeKnown {
				if p.HugePagesFreeKiB == nil {
					p.HugePagesFreeKiB = map[uint64]uint64{}
				}
				p.HugePagesFreeKiB[size] = hp.FreeKiB
			}
		}
	})
}

// observeSizes hands placement the sizes of our machines a listing found
// on the host (the VMs' sizes as their metadata records them).
func (h *host) observeSizes(machines []backend.Observed, sizes map[string]placement.Size) {
	seen := make(map[string]placement.Size, len(machines))
	for _, o := range machines {
		seen[o.MachineID] = sizes[o.MachineID]
	}
	h.plan.Observe(h.name, seen)
}

// capacityStatus fills the HostStatus fields of the host's name, labels,
// cordon and capacity, without an RPC.
func (h *host) capacityStatus(st *backend.HostStatus) {
	ph, used, _ := h.plan.Get(h.name)
	sz := h.Size()
	st.Name, st.Labels, st.Cordoned = h.name, maps.Clone(h.labels), ph.Cordoned
	st.Capacity = backend.HostCapacity{VCPUs: sz.VCPUs, MemoryMiB: sz.MemoryMiB, FreeMemoryMiB: sz.FreeMemoryMiB,
		PoolFreeBytes: sz.PoolFreeBytes, UsedVCPUs: used.VCPUs, UsedMemoryMiB: used.MemoryMiB, Machines: used.Machines}
	if ph.Enforce { // a --connect host's overcommit is "not enforced": 0
		st.Capacity.CPUOvercommit, st.Capacity.MemoryOvercommit = ratio(ph.CPUOvercommit), ratio(ph.MemoryOvercommit)
	}
}

func ratio(r float64) float64 {
	if r <= 0 {
		return 1
	}
	return r
}
