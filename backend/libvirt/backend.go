package libvirt

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/config"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domxml"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/guest"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/migrate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

// The configuration lives in backend/libvirt/config; these are the names
// callers of New use, kept here so that they need not know the sub-package.
type (
	Config = config.Config
	Host   = config.Host
)

// Values of --domain-type.
const (
	DomainTypeAuto = config.DomainTypeAuto
	DomainTypeKVM  = config.DomainTypeKVM
	DomainTypeQEMU = config.DomainTypeQEMU
)

// ParseConnect reads --connect (config.ParseConnect).
func ParseConnect(connect, defaultZone string) ([]Host, error) {
	return config.ParseConnect(connect, defaultZone)
}

// ValidDomainType checks a --domain-type value (config.ValidDomainType).
func ValidDomainType(s string) error { return config.ValidDomainType(s) }

// Backend implements backend.Backend and backend.ZoneReadiness over libvirt.
type Backend struct {
	cfg Config
	log *slog.Logger
	// loc: the hosts by zone and name, their books and the hosts
	// declared down; where a machine is, or goes (hosts.go).
	loc   *locator
	store volume.Store   // the pool of every host, as configured
	mover *migrate.Mover // live migration (backend/libvirt/migrate)
	// builder makes or adopts a Create's domain (create.go).
	builder *builder
	// remover removes a machine's domain and volumes on a host (delete.go).
	remover *remover
	// lister lists a host and reads its status (inventory.go).
	lister *lister
	// leftover: volumes failed migrations left on their destination
	// (leftovers.go).
	leftover leftovers

	// reconcileSoon asks the engine for a reconcile pass
	// (backend.ReconcileRequester): an abandoned call's late success.
	reconcileSoon chan struct{}

	// guests: the operations on a located guest and the runtime view of
	// the boots (backend/libvirt/guest).
	guests *guest.Guests

	// mayChange is backend.ChangeGater's hold on the calls that change a
	// host (hostconn.Config.MayChange), once set.
	mayChange atomic.Pointer[func() error]
}

var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.ZoneReadiness = (*Backend)(nil)
	_ backend.DomainTyper   = (*Backend)(nil)

	_ backend.ReconcileRequester = (*Backend)(nil)
)

// New validates cfg and starts one connection loop per host. It fails only
// on a bad configuration: unreachable hosts are reported, not fatal. It
// does not wait for any host: until a host's first connection attempt is
// over its zone reports backend.ErrHostConnecting, which a mutation may
// wait for, so a host that is down at start delays nothing else.
func New(cfg Config) (*Backend, error) {
	return newBackend(cfg, virt.Dial)
}

func newBackend(cfg Config, dial virt.DialFunc) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.SetDefaults()
	// The caller's logger already names the component.
	b := &Backend{cfg: cfg, log: cfg.Logger, reconcileSoon: make(chan struct{}, 1)}
	b.cfg.Logger = b.log
	b.loc = &locator{cfg: &b.cfg, log: b.log, hosts: map[string]*host{}, zoned: map[string][]*host{}, plan: placement.New(cfg.Policy)}
	b.store = volume.Store{Pool: cfg.Pool, Golden: cfg.Image, UserData: cfg.BaseUserData}
	b.builder = &builder{cfg: &b.cfg, log: b.log, store: b.store}
	b.remover = &remover{provider: cfg.Provider, store: b.store, log: b.log}
	b.lister = &lister{cfg: &b.cfg, log: b.log, plan: b.loc.plan, leftover: &b.leftover, store: b.store}
	b.guests = guest.New(guest.Config{Provider: cfg.Provider, AgentTimeout: cfg.AgentTimeout, Bootstrap: cfg.Bootstrap,
		Booted: cfg.Booted, WaitBooted: cfg.WaitBooted, BootTimeout: cfg.BootTimeout, Log: b.log})
	b.mover = &migrate.Mover{Provider: cfg.Provider, Store: b.store, Plain: cfg.MigratePlain, Log: b.log,
		Policy: func(hostType string) domxml.Policy { return b.builder.policyFor(hostType, "", "", backend.Shape{}) }}
	hostconn.StartEventLoop(b.log)
	// Every host's hostconn.Config.MayChange: the gate, once set.
	mayStart := func() error {
		if may := b.mayChange.Load(); may != nil {
			return (*may)()
		}
		return nil
	}
	for _, hc := range cfg.Hosts {
		if hc.Name == "" {
			hc.Name = hc.Zone
		}
		if err := b.loc.plan.AddHost(placement.Host{Name: hc.Name, Zone: hc.Zone, Enforce: hc.Enforce,
			CPUOvercommit: hc.CPUOvercommit, MemoryOvercommit: hc.MemoryOvercommit, Cordoned: hc.Cordoned}); err != nil {
			return nil, err
		}
		h := newHost(hc, &b.cfg, dial, b.loc.plan, b.askReconcile, mayStart)
		if _, ok := b.loc.zoned[hc.Zone]; !ok {
			b.loc.zones = append(b.loc.zones, hc.Zone)
		}
		b.loc.zoned[hc.Zone] = append(b.loc.zoned[hc.Zone], h)
		b.loc.hosts[hc.Name] = h
		b.loc.list = append(b.loc.list, h)
	}
	hostconn.LogLinkMode(b.log, hostConfig(&b.cfg))
	for _, h := range b.loc.list {
		h.Start()
	}
	return b, nil
}

// GateChanges is backend.ChangeGater.
func (b *Backend) GateChanges(may func() error) { b.mayChange.Store(&may) }

// ReconcileRequests is backend.ReconcileRequester: it receives when a
// call abandoned at its bound that changes a host succeeded after all
// (hostconn.Config.OnLateResult), so the engine reconciles soon.
func (b *Backend) ReconcileRequests() <-chan struct{} { return b.reconcileSoon }

// askReconcile asks for a pass (never blocks: one pending request is
// enough).
func (b *Backend) askReconcile(string) {
	select {
	case b.reconcileSoon <- struct{}{}:
	default:
	}
}

// AwaitFirstAttempts returns once every host's first connection attempt
// is over (connected, refused, or past the call bound), or ctx ends; it
// reports whether all were. Nothing in serving needs it: tests and tools
// that want every reachable host connected before they start do.
func (b *Backend) AwaitFirstAttempts(ctx context.Context) bool {
	for _, h := range b.loc.list {
		select {
		case <-h.FirstAttempt():
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// Zones lists the configured zones in --connect order.
func (b *Backend) Zones() []string { return append([]string(nil), b.loc.zones...) }

// ZoneReady reports (without an RPC) whether any host of the zone is
// connected: a zone with one host down still serves on the others.
func (b *Backend) ZoneReady(zone string) error { return b.loc.zoneReady(zone) }

// HostReady is backend.HostReadiness: the named host's own readiness
// (an unknown name: the zone's).
func (b *Backend) HostReady(zone, host string) error {
	if h := b.loc.hosts[host]; h != nil && h.zone == zone {
		return b.loc.ready(h)
	}
	return b.ZoneReady(zone)
}

// DomainType reports the domain type the zone's first connected host runs
// guests under ("" while none has connected).
func (b *Backend) DomainType(zone string) string {
	hs, err := b.loc.zoneHosts(zone)
	if err != nil {
		return ""
	}
	for _, h := range hs {
		if t := h.DomainType().Type; t != "" && h.Ready() == nil {
			return t
		}
	}
	return hs[0].DomainType().Type
}

// Close stops reconnecting and closes every connection, all hosts at once:
// each host's close is bounded (hostconn.Host.Close), so Close takes that bound
// whatever the number of hosts.
func (b *Backend) Close() error {
	b.guests.Close()
	var wg sync.WaitGroup
	for _, h := range b.loc.list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.Close()
		}()
	}
	wg.Wait()
	return nil
}
