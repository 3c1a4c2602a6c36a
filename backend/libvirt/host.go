package libvirt

import (
	"sync"
	"sync/atomic"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/placement"
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

	confirming atomic.Int32 // ConfirmGone lookups still inside libvirt
	listing    sync.Mutex   // held by the host's listing (inventory.go)
	versions   versionCache // libvirt's and the hypervisor's, per connection (inventory.go)
}

func newHost(h Host, cfg *Config, dial hostconn.DialFunc, plan *placement.Planner) *host {
	bh := &host{zone: h.Zone, name: h.Name, named: h.Named, enforce: h.Enforce, labels: h.Labels, plan: plan}
	hc := hostConfig(cfg)
	hc.Zone, hc.Name, hc.Named, hc.URI, hc.Dial = h.Zone, h.Name, h.Named, h.URI, dial
	// Placement learns with every change whether the host can take
	// machines (under the host's lock: see hostconn.Config.OnConnected),
	// and its size with every reading.
	hc.OnConnected = func(up bool) {
		if plan != nil {
			plan.Update(h.Name, func(p *placement.Host) { p.Connected = up })
		}
	}
	hc.OnSize = bh.toPlanner
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
		HugePageSizes: hugePageSizes(c.Shapes),
	}
}
