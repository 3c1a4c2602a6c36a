package hostconn

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// Config is one host's connection: who it is, how it is reached, its
// bounds, and the hooks by which its owner learns what changed.
type Config struct {
	Zone  string
	Name  string // stable host name (the zone's for its only --connect host)
	Named bool   // messages name the host too: a zone of several hosts
	URI   string // raw: may carry credentials' paths; never shown (Redact)

	// Dial opens a connection; nil is Dial. The backend's tests inject
	// faults through it.
	Dial virt.DialFunc
	// Logger is the base logger; the host adds its zone, URI (redacted)
	// and, when Named, its name.
	Logger *slog.Logger

	// DomainType (--domain-type): auto, kvm or qemu; "" means auto.
	DomainType string
	// ProbeName names the throwaway domain of the KVM probe (probeKVM):
	// one of the owner's, so its policy allows it and its listing skips it.
	ProbeName string
	// Pool is the storage pool whose free space is part of the host's size.
	Pool string
	// HugePageSizes (KiB) are the huge page sizes instance types use: each
	// reading of the host's size reads their free pages, for placement.
	HugePageSizes []uint64

	CallTimeout    time.Duration // --libvirt-call-timeout: every call's bound
	AgentTimeout   time.Duration // a guest-agent command's default budget on top
	MigrateTimeout time.Duration // a migration's budget on top
	ReconnectMin   time.Duration // first pause before re-dialling a lost host
	ReconnectMax   time.Duration // cap of that pause
	KeepAliveSecs  int           // watchdog ping interval (watch.go)
	KeepAliveCount uint          // ping intervals of silence before the link is dead

	// OnConnected is told whether the host can take work, with every
	// change. It runs under the host's lock, so its owner never sees a
	// host down that is up; it must not call back into the host.
	OnConnected func(up bool)
	// OnSize receives every reading of the host's size (size.go).
	OnSize func(Size)
	// OnLateResult, if set, is told when a call that changes the host
	// (define, start, migrate, undefine, ...) returns successfully after
	// it was abandoned at its bound (late.go): its effect happened after
	// the caller was told it failed, so the owner should reconcile soon.
	// It must not block or call back into the host.
	OnLateResult func(call string)
	// MayChange, if set, is asked before every call that changes the host
	// (late.go's list) but an abort: an error refuses the call, before
	// anything reaches libvirt, as a transient fault carrying it (a
	// leader whose lease renewal is late: docs/ha.md, "Quiet").
	MayChange func() error
}

// Host is one libvirt host: its connection, kept alive and re-dialled in the
// background, and what it last told us.
type Host struct {
	cfg   Config
	uri   string // raw; never shown
	shown string // redacted
	log   *slog.Logger
	dial  virt.DialFunc

	mu      sync.Mutex
	conn    virt.Conn  // nil while down
	choice  TypeChoice // domain type for guests, chosen on connect
	lastErr string
	since   time.Time // when it last went up or down
	closed  bool

	kick  chan struct{} // wakes the loop: the connection was lost
	stop  chan struct{}
	done  chan struct{}
	first chan struct{} // closed after the first dial attempt

	calls     *callSlots   // the current connection's call slots (bound.go); under mu
	link      linkState    // whether the connection's socket has TCP timeouts (sockopt.go); under mu
	threads   *hostThreads // the host's cap on calls inside libvirt, over its connections (bound.go)
	firstDone atomic.Bool  // the first dial attempt returned or ran past the bound

	capMu    sync.Mutex
	size     Size         // last capacity read from the host
	versions versionCache // libvirt's and the hypervisor's, per connection (size.go)
}

// New makes the host; Start dials it.
func New(cfg Config) *Host {
	shown := virt.Redact(cfg.URI)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("zone", cfg.Zone, "uri", shown)
	if cfg.Named {
		log = log.With("host", cfg.Name)
	}
	dial := cfg.Dial
	if dial == nil {
		dial = virt.Dial
	}
	return &Host{
		cfg: cfg, uri: cfg.URI, shown: shown, dial: dial,
		log:  log,
		kick: make(chan struct{}, 1), stop: make(chan struct{}),
		done: make(chan struct{}), first: make(chan struct{}),
		lastErr: "not connected yet", since: time.Now(),
		calls: newCallSlots(), threads: newHostThreads(),
	}
}

// Start runs the connection loop in the background until Close.
func (h *Host) Start() { go h.loop() }

// FirstAttempt is closed once the first connection attempt is over
// (connected, refused, or past the call bound).
func (h *Host) FirstAttempt() <-chan struct{} { return h.first }

// markFirst records that the first connection attempt is over (it
// returned, or ran past the call bound): until then the host's zone is
// "connecting", which a mutation may wait for, rather than down.
func (h *Host) markFirst() {
	if h.firstDone.CompareAndSwap(false, true) {
		close(h.first)
	}
}

func (h *Host) isUp() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conn != nil
}

// setDown records why the host is down; it reports whether that is news
// (so a host that stays down is not logged at Warn every retry).
func (h *Host) setDown(msg string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastErr == msg {
		return false
	}
	h.lastErr, h.since = msg, time.Now()
	return true
}

func (h *Host) unavailableLocked() error {
	if !h.firstDone.Load() {
		return fmt.Errorf("%s: %w (since %s)", h.Where(), backend.ErrHostConnecting, h.since.UTC().Format(time.RFC3339))
	}
	return fmt.Errorf("%s: %w: %s (since %s)", h.Where(), backend.ErrHostUnavailable,
		h.lastErr, h.since.UTC().Format(time.RFC3339))
}

// Where names the host in messages: `zone "z" (uri)`, with the host's
// name in a zone of several hosts.
func (h *Host) Where() string {
	if h.cfg.Named {
		return fmt.Sprintf("zone %q host %q (%s)", h.cfg.Zone, h.cfg.Name, h.shown)
	}
	return fmt.Sprintf("zone %q (%s)", h.cfg.Zone, h.shown)
}

// setConnectedLocked tells the owner (placement) whether the host can
// take machines. It runs under h.mu with the change of h.conn, so
// placement never sees a host down that is up (which would refuse a
// Create as "no room"). Lock order: h.mu, then the planner's; the planner
// never calls out.
func (h *Host) setConnectedLocked() {
	if h.cfg.OnConnected != nil {
		h.cfg.OnConnected(h.conn != nil)
	}
}

// Ready is ZoneReady for this host: cheap, no RPC. Its error wraps
// backend.ErrHostConnecting until the first attempt is over, then
// backend.ErrHostUnavailable while the host is down.
func (h *Host) Ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return h.unavailableLocked()
	}
	return nil
}

// Link names the current connection: the time it was made (zero while
// down). Facts that change only with a new daemon (its versions) may be
// kept for as long as it stays the same.
func (h *Host) Link() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return time.Time{}
	}
	return h.since
}

// DomainType is the domain type the host runs guests under, chosen at
// connect (zero before the first connection).
func (h *Host) DomainType() TypeChoice {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.choice
}

// Status is what the host last told us, without an RPC: the HostStatus
// fields of its connection and domain type.
func (h *Host) Status() backend.HostStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return backend.HostStatus{Zone: h.cfg.Zone, URI: h.shown, Connected: h.conn != nil, LastError: h.lastErr,
		DomainType: h.choice.Type, DomainTypeNote: h.choice.Fallback, LinkTimeouts: string(h.link),
		CallsInside: h.Inflight(), CallsAbandoned: h.Abandoned()}
}

// Scrub removes the host URI's secrets from err's text (see Scrub).
func (h *Host) Scrub(err error) error { return virt.Scrub(err, h.uri) }
