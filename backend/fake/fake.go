package fake

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

// Operation names, as passed to failure hooks and delay settings.
const (
	OpCreate    = "create"
	OpConfigure = "configure"
	OpDrain     = "drain"
	OpDelete    = "delete"
	OpInventory = "inventory"
	OpStart     = "start"
	OpMigrate   = "migrate"
	// OpDeleteCut is not an operation: a failure set for it (SetFailure)
	// cuts a Delete after it recorded its intent on the VM and before the
	// VM is removed, as a provider killed mid-Delete would.
	OpDeleteCut = "delete-cut"
)

// DefaultZones are served when Options.Zones is empty.
var DefaultZones = []string{"zone-a", "zone-b"}

// DomainPrefix starts every domain name: "bf-" + machine id.
const DomainPrefix = "bf-"

// FailFunc may fail an operation before it takes effect; for Inventory the
// id is the zone. A nil return lets the operation proceed.
type FailFunc func(op, machineID string) error

// Options configure a fake. The zero value is instant and never fails.
type Options struct {
	Zones  []string                 // default DefaultZones
	Delay  time.Duration            // applied to every operation
	Delays map[string]time.Duration // per operation, overriding Delay
	Fail   FailFunc
	// Hosts, when set, are the hypervisors of each zone (Zones is then
	// ignored: the zones are the hosts'); Policy chooses among them.
	Hosts  []Host
	Policy placement.Policy
}

// Binding is what Configure recorded: the cluster and a digest of the blob.
type Binding struct {
	ClusterID     string
	OperationID   string
	BlobDigest    [sha256.Size]byte
	BlobLen       int
	ShardMetadata map[string]string
}

// VM is one simulated domain.
type VM struct {
	MachineID    string
	OperationID  string // of the Create that built it
	Placement    backend.Placement
	InstanceType string
	VCPU         int
	MemoryMiB    int
	Running      bool
	// Run is the state set by SetRunState; zero while it runs as created.
	Run     backend.RunState
	Binding *Binding
	// Bootstrap is the guest's trace of its last Configure's hook (nil:
	// none; see probe.go).
	Bootstrap *BootstrapTrace
	// DeleteOperationID is the intent a Delete recorded on the VM before
	// removing it ("" = none): what a Delete cut short leaves behind.
	DeleteOperationID string
	// ConfigureIntent is what a Configure recorded on the VM before its
	// delay (the fake's hook) and removes with the binding: what a
	// Configure cut short, or failed, leaves behind (nil = none).
	ConfigureIntent *backend.ConfigureIntent
}

type failKey struct{ op, machineID string }

// Backend is the fake. All methods are safe for concurrent use.
type Backend struct {
	zones []string
	fail  FailFunc

	mu       sync.Mutex
	vms      map[string]*VM
	delay    time.Duration
	delays   map[string]time.Duration
	hang     map[string]bool
	failures map[failKey]error
	down     map[string]error
	calls    map[string]int
	closed   bool

	// Multi-host mode (Options.Hosts): nil planner means one implicit host
	// per zone, named after it, as before hosts files existed.
	planner  *placement.Planner
	hostList []Host
	hostDown map[string]bool
	// declared: the hosts declared down (SetDown), with the reason.
	declared map[string]string
	// zoneHosts and zoneDown count each zone's hosts and those down, so
	// readiness is O(1) however many hosts a zone has.
	zoneHosts, zoneDown map[string]int
}

var _ backend.Backend = (*Backend)(nil)
var _ backend.ZoneReadiness = (*Backend)(nil)
var _ backend.Starter = (*Backend)(nil)

// New returns a fake with opts applied. It panics on Hosts naming a host
// twice (a hosts file is validated before it gets here).
func New(opts Options) *Backend {
	zones := slices.Clone(opts.Zones)
	if len(zones) == 0 {
		zones = slices.Clone(DefaultZones)
	}
	b := &Backend{
		zones:    zones,
		fail:     opts.Fail,
		vms:      map[string]*VM{},
		delay:    opts.Delay,
		delays:   maps.Clone(opts.Delays),
		hang:     map[string]bool{},
		failures: map[failKey]error{},
		down:     map[string]error{},
		calls:    map[string]int{},
		hostDown: map[string]bool{},
		declared: map[string]string{},
	}
	if len(opts.Hosts) > 0 {
		if err := b.initHosts(opts); err != nil {
			panic(err)
		}
	}
	return b
}

// DomainName is the deterministic domain of a machine.
func DomainName(machineID string) string { return DomainPrefix + machineID }

// Zones lists the served zones.
func (b *Backend) Zones() []string { return slices.Clone(b.zones) }

// Close makes later operations fail as if every host were gone; it is
// idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

// ZoneReady reports whether a zone's host is reachable.
func (b *Backend) ZoneReady(zone string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.zoneErrLocked(zone)
}

func (b *Backend) zoneErrLocked(zone string) error {
	switch {
	case !slices.Contains(b.zones, zone):
		return fmt.Errorf("fake: zone %q: %w", zone, backend.ErrUnknownZone)
	case b.closed:
		return fmt.Errorf("fake: backend closed: %w", backend.ErrHostUnavailable)
	case b.down[zone] != nil:
		return fmt.Errorf("fake: zone %q: %w", zone, b.down[zone])
	case b.zoneHostsDownLocked(zone):
		return fmt.Errorf("fake: zone %q: %w: %w", zone, errHostsDown, backend.ErrHostUnavailable)
	}
	return nil
}

// Hosts reports each zone as a host with URI "fake://<zone>". It never
// blocks, so it has nothing to cancel.
func (b *Backend) Hosts(_ context.Context) []backend.HostStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.multiHost() {
		return b.hostStatusesLocked()
	}
	out := make([]backend.HostStatus, 0, len(b.zones))
	for _, z := range b.zones {
		st := backend.HostStatus{Name: z, Zone: z, URI: "fake://" + z, Connected: true,
			LibvirtVersion: "fake", HypervisorVersion: "fake"}
		if err := b.zoneErrLocked(z); err != nil {
			st.Connected, st.LastError = false, err.Error()
		}
		for _, vm := range b.vms {
			if vm.Placement.Zone == z {
				st.DomainCount++
			}
		}
		out = append(out, st)
	}
	return out
}
