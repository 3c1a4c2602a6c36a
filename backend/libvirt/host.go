package libvirt

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/guestfit"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/shapecheck"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"github.com/bigfleet/libvirt-provider/backend/placement"
	"libvirt.org/go/libvirt"
)

// host is one libvirt host as the backend sees it: its connection (the
// embedded hostconn.Host: connect, liveness, reconnect, call bounds and
// the host's facts) and what the backend keeps about it for placement and
// reconcile.
type host struct {
	*hostconn.Host

	zone    string
	name    string            // stable host name (the zone's for its only --connect host)
	named   bool              // placements carry name (see Host.Named)
	enforce bool              // capacity limits placement (see Host.Enforce)
	labels  map[string]string // from --hosts
	plan    *placement.Planner

	fit        guestfit.Cache // what its QEMU offers a migrated guest, per connection (backend/libvirt/migrate/dest.go)
	confirming atomic.Int32   // ConfirmGone lookups still inside libvirt
	listing    sync.Mutex     // held by the host's listing (inventory.go)
}

func newHost(h Host, cfg *Config, dial virt.DialFunc, plan *placement.Planner, onLate func(call string), mayChange func() error) *host {
	bh := &host{zone: h.Zone, name: h.Name, named: h.Named, enforce: h.Enforce, labels: h.Labels, plan: plan}
	hc := hostConfig(cfg)
	hc.Zone, hc.Name, hc.Named, hc.URI, hc.Dial = h.Zone, h.Name, h.Named, h.URI, dial
	// Placement learns with every change whether the host can take
	// machines (under the host's lock: see hostconn.Config.OnConnected),
	// and its size with every reading.
	if plan != nil {
		hc.OnConnected = plan.ConnectedHook(h.Name)
	}
	hc.OnSize = bh.toPlanner
	hc.OnLateResult = onLate // an abandoned call's late success: reconcile soon
	hc.MayChange = mayChange // backend.ChangeGater
	bh.Host = hostconn.New(hc)
	return bh
}

// hostConfig is what every host's connection shares of c.
func hostConfig(c *Config) hostconn.Config {
	return hostconn.Config{
		Logger: c.Logger, DomainType: c.DomainType, ProbeName: meta.NamePrefix(c.Provider) + "kvm-probe", Pool: c.Pool,
		CallTimeout: c.CallTimeout, AgentTimeout: c.AgentTimeout, MigrateTimeout: c.MigrateTimeout,
		ReconnectMin: c.ReconnectMin, ReconnectMax: c.ReconnectMax,
		KeepAliveSecs: c.KeepAliveSecs, KeepAliveCount: c.KeepAliveCount,
		HugePageSizes: shapecheck.HugePageSizes(c.Shapes),
	}
}

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

// listingStarts is called before the host's domains are listed: placement
// must know what happened since, or a listing that saw a migrating
// machine on its source would book it back there after the move ended.
func (h *host) listingStarts() placement.Listing { return h.plan.ListingStarts(h.name) }

// observeSizes hands placement the sizes of our machines the listing l
// found on the host (the VMs' sizes as their metadata records them).
func (h *host) observeSizes(l placement.Listing, machines []backend.Observed, sizes map[string]placement.Size) {
	seen := make(map[string]placement.Size, len(machines))
	for _, o := range machines {
		seen[o.MachineID] = sizes[o.MachineID]
	}
	h.plan.ObserveListing(l, seen)
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

// Classification happens once, in hostconn (errors.As on libvirt.Error);
// these are the backend's names for it.
var (
	isCode  = virt.IsCode
	message = virt.Message
)

func isNoDomain(err error) bool { return isCode(err, libvirt.ERR_NO_DOMAIN) }
func isNoVolume(err error) bool { return isCode(err, libvirt.ERR_NO_STORAGE_VOL) }
