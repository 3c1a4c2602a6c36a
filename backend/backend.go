package backend

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors a backend wraps so the engine can classify failures
// without knowing the substrate.
var (
	// ErrHostUnavailable: the host of the zone cannot be reached right now.
	ErrHostUnavailable = errors.New("host unavailable")
	// ErrHostConnecting: the host has not finished its first connection
	// attempt since start (it also wraps ErrHostUnavailable). A mutation
	// may wait briefly for it rather than be refused at once.
	ErrHostConnecting = fmt.Errorf("first connection attempt in progress: %w", ErrHostUnavailable)
	// ErrNotFound: the domain (or another piece) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrNotOurs: a domain with our derived name exists but its metadata says
	// it belongs to another provider instance or machine; never adopt it.
	ErrNotOurs = errors.New("domain exists but is not ours")
	// ErrUnknownZone: the spec names a zone no host serves.
	ErrUnknownZone = errors.New("unknown zone")
	// ErrNoCapacity: no connected, schedulable host of the zone has room
	// for the machine. Permanent for this Create (it ends FAILED at once,
	// its last_error naming the zone, the request and the best host's
	// free capacity), unlike ErrHostUnavailable.
	ErrNoCapacity = errors.New("no host of the zone has room")
	// ErrUnknownHost: a maintenance call names a host no zone has.
	ErrUnknownHost = errors.New("unknown host")
	// ErrPlacementGone: a Create's recorded host (MachineSpec.Host) is no
	// longer configured, and every host of the zone answered that the
	// machine has no domain: the Create may be placed again.
	ErrPlacementGone = errors.New("the recorded host is gone and no host of the zone holds the domain")
	// ErrHostDown: the call's host is declared down (HostDownDeclarer):
	// nothing is asked of it until the declaration ends. Permanent for
	// the call (not transient): waiting cannot help.
	ErrHostDown = errors.New("host declared down")
	// ErrNothingDone: the call asked nothing of the host (it was not
	// connected when the call began); it wraps the cause, which is also
	// an ErrHostUnavailable.
	ErrNothingDone = errors.New("nothing was asked of the host")
	// ErrNewerTerm: the domain carries a newer leader's term than the
	// one this replica acts under (LeaderTermer): another replica leads,
	// and this one must not touch the domain. Transient for the call: the
	// replica steps down; the leader will act.
	ErrNewerTerm = fmt.Errorf("a newer leader's term is on the domain: another replica leads: %w", ErrTransient)
)

// MachineSpec is what Create needs to build a VM.
type MachineSpec struct {
	MachineID    string
	OperationID  string
	Zone         string
	InstanceType string
	VCPU         int
	MemoryMiB    int
	// Marks are the machine's fence marks by shard id, recorded with it.
	Marks map[string]FenceMark
	// Host is the host an earlier attempt of this Create chose (Placer),
	// recorded before any work: the Create goes there and nowhere else,
	// since a domain may already exist there. "" lets the backend choose.
	Host string
}

// FenceMark is the newest fencing token (epoch, sequence) a machine
// accepted from one shard. Backends store a machine's marks next to its
// binding and hand them back in Observed, so they survive the loss of the
// engine's state file exactly as the binding does; they never interpret
// them.
type FenceMark struct {
	Epoch, Sequence int64
}

// Placement says where a VM lives once it exists.
type Placement struct {
	Zone string
	// Host is the stable name of the hypervisor within the zone. Empty in
	// placements recorded before a zone could hold several hosts: the
	// backend then finds the domain (a single-host zone's only host).
	Host   string
	Domain string
	// Why is the placement decision and its reason, for the log and the
	// machine's history ("" when the backend made no choice). Not part of
	// the placement's identity.
	Why string
}

// Ref is the HostRef.ref value: "zone/host/domain", or "zone/domain" for a
// placement without a host name (so refs recorded before stay valid).
func (p Placement) Ref() string {
	if p.Host == "" {
		return p.Zone + "/" + p.Domain
	}
	return p.Zone + "/" + p.Host + "/" + p.Domain
}

// ConfigureSpec is what Configure needs to join a VM to a cluster. The
// bootstrap blob is opaque: backends deliver it and never parse or log it.
type ConfigureSpec struct {
	MachineID     string
	OperationID   string
	Placement     Placement
	ClusterID     string
	BootstrapBlob []byte
	ShardMetadata map[string]string
	// Marks are the machine's fence marks by shard id, recorded with the
	// binding (a backend never lowers a recorded mark).
	Marks map[string]FenceMark
	// MayStart: the engine's arbiter found that no other host of the zone
	// could run the guest, so a domain the Configure finds shut off may
	// be started (and booted) first. Otherwise such a domain is not
	// started, and the Configure fails with WhyNotStart (transient while
	// hosts that could hold a running copy are unlisted): a stopped copy
	// may be a migration's stale source.
	MayStart    bool
	WhyNotStart error
}

// DrainSpec is what Drain needs. Grace 0 means "no grace", never "forever".
type DrainSpec struct {
	MachineID   string
	OperationID string
	Placement   Placement
	ClusterID   string
	Grace       time.Duration
	// Marks: as in ConfigureSpec.
	Marks map[string]FenceMark
}

// DeleteSpec is what Delete needs. Placement may be empty when the VM never
// got one; backends then derive the domain from the machine id.
type DeleteSpec struct {
	MachineID   string
	OperationID string
	Zone        string
	Placement   Placement
}

// Observed is one of our own domains as found on a host by Inventory.
type Observed struct {
	MachineID     string
	OperationID   string
	Placement     Placement
	Running       bool
	ClusterID     string // empty unless a binding was recorded
	ShardMetadata map[string]string
	// Marks are the fence marks recorded with the domain, by shard id
	// (nil when none were, e.g. by an older provider version).
	Marks map[string]FenceMark
	// Run is the domain's run state with the host's reason for it; the
	// zero value means the backend did not say (Running alone counts).
	Run RunState
	// DeleteOperationID names the Delete (or Release) begun on this
	// domain, recorded on the host before anything was destroyed; ""
	// when none was. Such a domain is a Delete cut short, never a
	// machine to adopt or start: it outlives a lost state file.
	DeleteOperationID string
	// Configure is the intent of a Configure begun on this domain and not
	// ended on the host yet (its binding not recorded, nor rolled back);
	// zero when none. A record rebuilt from the hosts takes such a domain
	// as a Configure cut short, to be ended as its guest tells
	// (ConfigureProber), never adopted IDLE.
	Configure ConfigureIntent
}

// ConfigureIntent is what a Configure records on the domain before its
// bootstrap hook may start: enough to end it after a lost state file
// (never the bootstrap blob). The zero value: none.
type ConfigureIntent struct {
	OperationID   string
	ClusterID     string
	ShardMetadata map[string]string
}

// Begun reports whether a Configure was begun.
func (c ConfigureIntent) Begun() bool { return c.OperationID != "" }

// Run states, as virsh domstate names them (one word each, for labels).
const (
	RunRunning   = "running"
	RunBlocked   = "blocked"
	RunPaused    = "paused"
	RunShutdown  = "shutdown" // being shut down: still a process
	RunShutoff   = "shutoff"
	RunCrashed   = "crashed"
	RunSuspended = "pmsuspended"
	RunNoState   = "nostate"
)

// RunState is a domain's run state and the host's reason for it (libvirt's
// state reason: "destroyed", "crashed", "shutdown", "user", "ioerror", ...).
type RunState struct {
	State  string
	Reason string
}

// Up reports whether the guest is executing (running, or blocked on I/O).
// Unknown counts as up: not running must be positive evidence.
func (r RunState) Up() bool {
	return r.State == "" || r.State == RunRunning || r.State == RunBlocked
}

// Inactive reports whether no guest process exists (shut off or crashed):
// the only states a Start brings back.
func (r RunState) Inactive() bool { return r.State == RunShutoff || r.State == RunCrashed }

// String reads like virsh domstate --reason: "shut off (crashed)".
func (r RunState) String() string {
	s := map[string]string{RunShutoff: "shut off", RunShutdown: "in shutdown", RunNoState: "no state"}[r.State]
	if s == "" {
		s = r.State
	}
	if r.Reason != "" && r.Reason != "unknown" {
		s += " (" + r.Reason + ")"
	}
	return s
}

// ErrNotRunning: the machine's VM exists but is not running, so nothing
// can reach its guest agent (a Drain or Configure fails at once with it).
var ErrNotRunning = errors.New("domain is not running")

// ZoneInventory is the outcome of listing one host.
type ZoneInventory struct {
	Zone     string
	Err      error // non-nil: the host could not be listed; Machines is empty
	Machines []Observed
	// Hosts and Unlisted name, as Placement.Host does, the zone's hosts
	// this listing covers and those it could not list, for backends whose
	// zones hold several hosts (both empty: the zone is one whole). A
	// machine of an unlisted host is missing from Machines, which proves
	// nothing about it: its bindings and fence marks are not known yet.
	Hosts, Unlisted []string
	// Down names the zone's hosts declared down (HostDownDeclarer), with
	// the reason given: they are in Hosts (listed, nothing running), never
	// in Unlisted, and Machines holds nothing of theirs.
	Down map[string]string
	// Fenced are the copies found on declared-down hosts that answered
	// again: never counted as the machine, never started. The engine
	// destroys those of machines that live elsewhere or were deleted
	// (FencedDestroyer) and reports the rest.
	Fenced []Observed
}

// MarkClearer is implemented by backends that record fence marks with
// their machines (FenceMark). ClearMark removes shardID's mark from the
// metadata of the machine's domain at p (nothing to do when it holds
// none): without it, a mark an operator cleared from the state would
// come back from the host after a lost state file.
type MarkClearer interface {
	ClearMark(ctx context.Context, machineID string, p Placement, shardID string) error
}

// FencedDestroyer is implemented by backends that declare hosts down
// (HostDownDeclarer). DestroyFenced destroys our domain of machineID at
// pl, on a host that is still declared down, with its volumes: a copy
// the fenced rejoin found stale. It never starts anything, and refuses a
// host that is not declared down (Delete is the way there).
type FencedDestroyer interface {
	DestroyFenced(ctx context.Context, machineID string, pl Placement) error
}

// HostStatus describes one host for readiness and the admin API.
type HostStatus struct {
	Name     string // stable, unique across zones; the zone's name for a --connect host
	Labels   map[string]string
	Cordoned bool // no new placements go there
	// Down: the operator declared the host down for sure (powered off or
	// fenced; HostDownDeclarer), with DownReason. It takes no work, and
	// its zone's decisions count it as listed with nothing running.
	Down              bool
	DownReason        string
	Capacity          HostCapacity
	Zone              string
	URI               string // redacted: no userinfo, no query string
	Connected         bool
	LastError         string
	LibvirtVersion    string
	HypervisorVersion string
	PoolCapacity      uint64
	PoolAllocation    uint64
	DomainCount       int
	// DomainType is what the host's guests run under ("kvm", "qemu"), ""
	// until it connected; DomainTypeNote says why auto fell back to qemu.
	DomainType     string
	DomainTypeNote string
	// LinkTimeouts is whether the connection's socket has TCP timeouts
	// (TCP_USER_TIMEOUT): "set", "missing" (a network transport whose
	// socket was not found: a dead link is found only by keepalive or the
	// watchdog), or "" (a local transport, or not connected yet).
	LinkTimeouts string
	// CallsInside are the host's calls (and watchdog pings) inside
	// libvirt now, over all its connections: the threads it holds;
	// CallsAbandoned those of them nobody waits for any more (past their
	// bound, most often on a lost connection).
	CallsInside, CallsAbandoned int
}

// HostCapacity is one host's size, read from libvirt (node info, free
// memory, pool info) and kept current, and what our VMs there are sized to
// use, in-flight reservations included. Zero fields: not read yet.
type HostCapacity struct {
	VCPUs            int     // the host's logical CPUs
	MemoryMiB        int64   // the host's memory
	FreeMemoryMiB    int64   // free now, as the host reports it
	PoolFreeBytes    uint64  // free space of the storage pool
	CPUOvercommit    float64 // vCPUs placeable = VCPUs × CPUOvercommit
	MemoryOvercommit float64 // MiB placeable = MemoryMiB × MemoryOvercommit
	UsedVCPUs        int     // sized vCPUs of our VMs there, reservations included
	UsedMemoryMiB    int64   // sized memory of our VMs there, reservations included
	Machines         int     // our VMs there, reservations included
}

// HostDownDeclarer is implemented by backends whose zones hold several
// hosts. SetDown(host, true, reason) records the operator's statement
// that the host is off or fenced for sure (an IPMI power-off, a pulled
// cable): from then on it gets no placements and no calls that could
// touch its domains, and its zone's listings count it as listed with
// nothing running (ZoneInventory.Down), so the zone's Creates, Deletes
// and recoveries go on and the machines whose only copy was there can be
// failed naming the declaration. SetDown(host, false, "") ends it. While
// declared down, a host that answers again is fenced: every domain of
// ours on it whose machine lives elsewhere or was deleted is destroyed,
// never started. The declaration is the caller's to persist (the admin
// service keeps it beside the state file and applies it at start).
type HostDownDeclarer interface {
	SetDown(host string, down bool, reason string) error // ErrUnknownHost
}

// LeaderTerm names a leader's term under --leader-elect: the Kubernetes
// Lease (its uid: a Lease deleted and made again starts a new count) and
// its leaseTransitions when this replica acquired it. Terms compare only
// within one Lease. The zero value: no election.
type LeaderTerm struct {
	Lease string
	N     int64
}

// Newer reports whether t is a later term of the same Lease than own.
func (t LeaderTerm) Newer(own LeaderTerm) bool {
	return own.Lease != "" && t.Lease == own.Lease && t.N > own.N
}

// LeaderTermer is implemented by backends that stamp the leader's term on
// every domain they write (definitions and metadata) and refuse, with
// ErrNewerTerm, to change a domain that carries a newer term of the same
// Lease: the second line against two replicas acting at once. onNewer is
// told (once) when such a domain is found, so the replica steps down.
// Without a term set, nothing is stamped nor checked.
type LeaderTermer interface {
	SetLeaderTerm(t LeaderTerm, onNewer func(found LeaderTerm))
}

// ChangeGater is implemented by backends that can hold back every call
// that would change a host: from GateChanges on, such a call is refused
// before it reaches the host, as a transient fault carrying may's error,
// whenever may returns one (a leader whose lease renewal is late, so that
// nothing it starts can still be running when the lease expires). An
// abort of a running job is never held back.
type ChangeGater interface {
	GateChanges(may func() error)
}

// HostLinker is implemented by backends with hosts whose link state is
// known without a call: each host's name, zone, URI, whether it is
// connected (and the last error) and its down declaration, as Hosts
// reports them but without a round trip to any host. Watchers that look
// often (the fence command's, hostfence) use it.
type HostLinker interface {
	HostLinks() []HostStatus
}

// HostMaintainer is implemented by backends whose zones hold several
// hosts: a cordoned host gets no new placements (its machines stay).
type HostMaintainer interface {
	SetCordoned(host string, cordoned bool) error // ErrUnknownHost
}

// Backend carries out transitions on a substrate. Every method is safe for
// concurrent use on different machines; the engine never runs two methods on
// one machine at once. Each method must honour ctx (the transition's
// timeout) and be idempotent: the engine re-runs an interrupted transition
// after a restart with the same operation id.
type Backend interface {
	// Zones lists the zones this backend serves.
	Zones() []string
	// Create builds and starts the VM and returns where it lives. If a VM of
	// ours for this machine already exists it is adopted, never a stranger's.
	Create(ctx context.Context, spec MachineSpec) (Placement, error)
	// Configure delivers the bootstrap blob, runs the bootstrap hook, waits
	// for readiness and only then records the cluster binding.
	Configure(ctx context.Context, spec ConfigureSpec) error
	// Drain runs the drain hook and clears the binding.
	Drain(ctx context.Context, spec DrainSpec) error
	// Delete destroys the VM and its volumes; a missing piece is not an error.
	Delete(ctx context.Context, spec DeleteSpec) error
	// Inventory lists our own domains, per zone; one slow or dead host must
	// not stall the others.
	Inventory(ctx context.Context) []ZoneInventory
	// Hosts reports the state of each host.
	Hosts(ctx context.Context) []HostStatus
	// Close releases connections.
	Close() error
}

// ZoneStreamer is implemented by backends that list hosts one by one with
// bounded concurrency: the engine adopts (and marks listed) each zone as
// soon as its own hosts have answered, so a host that is down or slow
// never delays another zone.
type ZoneStreamer interface {
	// InventoryEach lists every host, at most concurrency at a time
	// (≤ 0: the backend's default), and calls fn once per zone, in the
	// order its last host finished, with the same value Inventory would
	// give for that zone. Calls to fn never overlap. It returns after the
	// last fn call (a host that does not answer within the backend's
	// inventory timeout yields its zone's Err, never a wait beyond it).
	InventoryEach(ctx context.Context, concurrency int, fn func(ZoneInventory))
}

// ZoneReadiness is implemented by backends that can tell cheaply whether a
// zone's host is reachable right now. The engine refuses to accept a
// mutation (Unavailable) for a zone whose host reports an error.
type ZoneReadiness interface {
	ZoneReady(zone string) error
}

// PlacementReadiness is implemented by backends whose zones hold several
// hosts: it tells cheaply (no RPC) whether the host of one machine's
// placement is reachable right now, so a mutation of a machine whose own
// host is down can be refused (Unavailable) while its zone, served by
// other hosts, is ready. A placement whose host is not known answers nil
// (ZoneReady decides).
type PlacementReadiness interface {
	PlacementReady(pl Placement) error
}

// DomainTyper is implemented by backends whose hosts run guests under a
// chosen accelerator; DomainType is cheap (no RPC) and "" for a zone whose
// host has not connected yet.
type DomainTyper interface {
	DomainType(zone string) string
}

// Confirmer is implemented by backends that can check one machine's VM
// directly. The engine declares a machine vanished only when its host's
// listing succeeded without it AND ConfirmGone reports gone: a direct
// lookup said the VM does not exist. Any error means "not known", and the
// machine is left as it is.
type Confirmer interface {
	ConfirmGone(ctx context.Context, machineID string, pl Placement) (gone bool, err error)
}

// Starter is implemented by backends that can start a machine's stopped
// VM again. Start is idempotent: a VM already running is success. The
// engine calls it through the machine's call gate, never during another
// backend call on that machine.
type Starter interface {
	Start(ctx context.Context, machineID string, pl Placement) error
}

// ReconcileRequester is implemented by backends that learn, outside any
// call of the engine, that a host changed in a way only a reconcile pass
// can judge: a call abandoned at its bound (a define, start, migration,
// undefine...) that succeeded after all. ReconcileRequests receives once
// for one or more such requests and never closes; the engine runs a pass
// soon after each.
type ReconcileRequester interface {
	ReconcileRequests() <-chan struct{}
}

// Abandoner is implemented by backends that can clean up after a
// Configure the engine will not finish (cut by a restart): the partial
// blob and the hook processes it left in the guest are removed. A VM that
// is not running has nothing to clean: success. Called through the
// machine's call gate.
type Abandoner interface {
	AbandonConfigure(ctx context.Context, machineID string, pl Placement) error
}

// HookTrace is what a guest shows of the bootstrap hook of one Configure
// (by operation id), read after the provider that ran it was cut off.
type HookTrace int

const (
	// HookNeverStarted: the guest holds no trace of this operation's
	// bootstrap hook (a trace of another operation does not count).
	HookNeverStarted HookTrace = iota + 1
	// HookRunning: it started and its process still runs.
	HookRunning
	// HookSucceeded: it exited 0.
	HookSucceeded
	// HookFailed: it exited non-zero (ExitCode).
	HookFailed
	// HookVanished: it started, no longer runs, and left no exit status
	// (killed, or the guest rebooted under it): nobody can tell what it did.
	HookVanished
)

func (h HookTrace) String() string {
	switch h {
	case HookNeverStarted:
		return "never started"
	case HookRunning:
		return "running"
	case HookSucceeded:
		return "finished ok"
	case HookFailed:
		return "finished failed"
	case HookVanished:
		return "started, then vanished without an exit status"
	}
	return "unknown"
}

// ConfigureTrace is a ConfigureProber's answer.
type ConfigureTrace struct {
	Hook     HookTrace
	ExitCode int // for HookFailed
}

// ConfigureProber is implemented by backends whose guests keep, keyed by
// operation id, a trace of a Configure's bootstrap hook that outlives the
// provider. The engine asks it about a Configure cut by a restart (whose
// blob is gone), to roll it back, finish it, or fail it with the cause.
// Its Configure records the Configure's intent on the domain before the
// bootstrap hook may start (Observed.Configure) and removes it with the
// binding; a failed Configure keeps it, so that after a lost state file
// the guest, not the bare domain, says how it ended. The methods go
// through the machine's call gate; spec carries no blob.
type ConfigureProber interface {
	// ProbeConfigure answers what became of the bootstrap hook of the
	// Configure spec.OperationID. An error means the guest could not be
	// asked (it may answer later; ErrNotFound: its domain is gone).
	ProbeConfigure(ctx context.Context, spec ConfigureSpec) (ConfigureTrace, error)
	// FinishConfigure ends a Configure whose bootstrap hook finished ok as
	// Configure would have: it waits for the ready hook and only then
	// records the binding (and removes the Configure's intent).
	FinishConfigure(ctx context.Context, spec ConfigureSpec) error
	// RollBackConfigure records on the host that the Configure
	// spec.OperationID was rolled back (its hook never started): its
	// intent is removed, so a later listing does not take it as cut
	// again. An intent of another operation is left alone.
	RollBackConfigure(ctx context.Context, spec ConfigureSpec) error
}

// MigrateSpec is what a live migration needs: the machine, where its VM
// is now, its size (booked on the destination), and optionally the host
// to move it to ("" lets the zone's placement choose).
type MigrateSpec struct {
	MachineID string
	Placement Placement
	VCPU      int
	MemoryMiB int
	ToHost    string
}

// Migrator is implemented by backends whose zones hold several hosts and
// that can move a running VM between them without stopping it. Migrate
// books the destination before any work and returns the new placement
// (Why says which host was chosen and why). On failure the VM keeps
// running where it was, whatever was made on the destination is removed,
// and the error says why: a refusal of the destination wraps
// ErrNoCapacity or ErrUnknownHost. The engine calls it through the
// machine's call gate, never during another backend call on that machine.
type Migrator interface {
	Migrate(ctx context.Context, spec MigrateSpec) (Placement, error)
}

// Placer is implemented by backends that choose among several hosts of a
// zone. Place books a host for a Create without touching it; the engine
// records the choice with the CREATING machine before Create runs, so a
// Create resumed after a crash goes back to the host that may already
// hold its domain instead of building a second one elsewhere. A machine
// already booked keeps its host. Errors are Create's (ErrNoCapacity,
// ErrHostUnavailable, ErrUnknownZone).
type Placer interface {
	Place(spec MachineSpec) (Placement, error)
	// Unplace drops the booking of a machine whose Create never reached
	// its host (ErrNothingDone on every attempt), so it may be placed
	// again on a host that is up.
	Unplace(zone, machineID string)
}

// CopyRemover is implemented by backends whose zones hold several hosts,
// where one machine can end up with a domain on two of them (a Create
// resumed elsewhere by an older provider, a copy made by hand). RemoveCopy
// deletes the copy at spare, only after checking afresh that the copy at
// keep is the machine's and running, and that the spare copy was never
// bound to a cluster and is not paused; otherwise it deletes nothing and
// says why.
type CopyRemover interface {
	RemoveCopy(ctx context.Context, machineID string, spare, keep Placement) error
}

// HostReadiness is implemented by backends whose zones hold several
// hosts: HostReady is ZoneReady for one host (named as Placement.Host),
// so a mutation of a machine on a host that is down is refused at once
// instead of waiting for a listing that cannot come.
type HostReadiness interface {
	HostReady(zone, host string) error
}

// MigrationRecovery is what RecoverMigration found and did.
type MigrationRecovery struct {
	// Live is the machine's one running copy afterwards.
	Live Placement
	// Completed: the migration had finished (the copy that runs is not
	// the recorded one); otherwise it had not, and the recorded copy was
	// kept (resumed if it was paused).
	Completed bool
	// Resumed: the kept copy was paused by the migration and was resumed.
	Resumed bool
	// Removed are the copies deleted (domain and volumes).
	Removed []Placement
}

// MigrationRecoverer is implemented by backends that live-migrate
// (Migrator). A provider that dies mid-migration can leave the source
// paused by the migration (after the copy, before the confirm step) and a
// domain on the destination. RecoverMigration reads the copies afresh and
// leaves exactly one running: a running copy elsewhere with the source
// paused or gone means the migration completed (the stale source is
// removed); the recorded copy paused by the migration with no copy
// running means it did not (the recorded copy is resumed, the other
// removed with its volumes). Any other picture (a migration job still
// active, two running copies, a copy paused for another reason) changes
// nothing and is an error saying why.
type MigrationRecoverer interface {
	RecoverMigration(ctx context.Context, machineID string, recorded Placement, copies []Placement) (MigrationRecovery, error)
}

// GuestAddresser is implemented by backends that can read a running
// guest's network addresses through its agent ("eth0 192.0.2.10/24", global
// addresses only). The engine reads them once a Configure succeeded: the
// agent has just answered, so the call costs one agent round trip. An agent
// that refuses the command is not an error: nil, nil (addresses unknown).
// The addresses are for people (admin API, libvirtctl, history), not for
// BigFleet's wire, which has no field for them.
type GuestAddresser interface {
	GuestAddresses(ctx context.Context, machineID string, pl Placement) ([]string, error)
}

// Boot phases of BootStatus.
const (
	BootBooting = "booting"     // the guest runs and has not said its boot is complete
	BootFailed  = "boot failed" // its check ended without a boot: the image said it failed, or the agent or the boot did not finish in time (Reason says which)
)

// BootStatus is what a backend knows, without any RPC, about a machine's
// guest that is not (yet) booted: the phase, the last reason the guest gave
// ("waiting for network-online.target") and since when.
type BootStatus struct {
	Phase  string
	Reason string
	Since  time.Time
}

// BootReporter is implemented by backends that wait for a guest's boot
// (a Create before IDLE, a guest started again by reconcile). BootStatus
// reports a machine whose guest is booting or whose boot failed; ok is
// false for a booted guest or one the backend knows nothing of. It is a
// runtime view (not persisted) for people: BigFleet's wire has no field
// for it.
type BootReporter interface {
	BootStatus(machineID string) (BootStatus, bool)
}
