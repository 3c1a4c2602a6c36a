package libvirt

import (
	"maps"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

// hostSize is what a host last said about its size (virNodeGetInfo,
// virNodeGetFreeMemory, the storage pool's info). Zero fields: not read.
type hostSize struct {
	VCPUs         int
	MemoryMiB     int64
	FreeMemoryMiB int64
	PoolFreeBytes uint64
	PoolCapacity  uint64
	PoolAlloc     uint64
	PoolKnown     bool
}

// readSize reads the host's size and hands it to placement. It runs at
// connect and with every listing; a reading that fails keeps the last
// one (logged at debug: the listing's own errors say what is wrong).
func (h *host) readSize(conn lvConn) {
	h.capMu.Lock()
	sz := h.size
	h.capMu.Unlock()
	if info, err := conn.GetNodeInfo(); err == nil {
		sz.VCPUs, sz.MemoryMiB = int(info.Cpus), int64(info.Memory/1024)
	} else {
		h.log.Debug("node info not read", "err", scrub(err, h.uri))
	}
	if free, err := conn.GetFreeMemory(); err == nil {
		sz.FreeMemoryMiB = int64(free >> 20)
	} else {
		h.log.Debug("free memory not read", "err", scrub(err, h.uri))
	}
	if pool, err := conn.LookupStoragePoolByName(h.cfg.Pool); err == nil {
		if info, err := pool.GetInfo(); err == nil {
			sz.PoolFreeBytes, sz.PoolCapacity, sz.PoolAlloc, sz.PoolKnown = info.Available, info.Capacity, info.Allocation, true
		}
		_ = pool.Free()
	}
	h.capMu.Lock()
	h.size = sz
	h.capMu.Unlock()
	h.plan.Update(h.name, func(p *placement.Host) {
		p.VCPUs, p.MemoryMiB, p.PoolFreeBytes, p.PoolKnown = sz.VCPUs, sz.MemoryMiB, sz.PoolFreeBytes, sz.PoolKnown
	})
}

func (h *host) lastSize() hostSize {
	h.capMu.Lock()
	defer h.capMu.Unlock()
	return h.size
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
	sz := h.lastSize()
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
