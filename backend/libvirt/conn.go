package libvirt

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

// eventLoop starts libvirt's default event loop once per process. Close
// callbacks only work while it runs, and it must be registered
// before the first connection is opened.
var eventLoop sync.Once

func startEventLoop(log *slog.Logger) {
	eventLoop.Do(func() {
		if err := libvirt.EventRegisterDefaultImpl(); err != nil {
			log.Error("libvirt event loop: register failed; loss detection by close callback is off", "err", err)
			return
		}
		go func() {
			for {
				if err := libvirt.EventRunDefaultImpl(); err != nil {
					log.Error("libvirt event loop", "err", err)
					time.Sleep(100 * time.Millisecond) // never spin on a persistent failure
				}
			}
		}()
	})
}

// dialFunc opens a connection; tests replace it.
type dialFunc func(uri string) (lvConn, error)

// host is one libvirt host: its connection, kept alive and re-dialled in the
// background, and what it last told us.
type host struct {
	zone    string
	name    string            // stable host name (the zone's for its only --connect host)
	named   bool              // placements carry name (see Host.Named)
	enforce bool              // capacity limits placement (see Host.Enforce)
	labels  map[string]string // from --hosts
	plan    *placement.Planner
	uri     string // raw; never shown
	shown   string // redacted
	cfg     *Config
	log     *slog.Logger
	dial    dialFunc

	mu      sync.Mutex
	conn    lvConn     // nil while down
	choice  typeChoice // domain type for guests, chosen on connect
	lastErr string
	since   time.Time // when it last went up or down
	closed  bool

	kick  chan struct{} // wakes the loop: the connection was lost
	stop  chan struct{}
	done  chan struct{}
	first chan struct{} // closed after the first dial attempt

	confirming atomic.Int32 // ConfirmGone lookups still inside libvirt
	listing    sync.Mutex   // held by the host's listing (inventory.go)
	calls      *callSlots   // admission and bound of every call (bound.go)
	firstDone  atomic.Bool  // the first dial attempt returned or ran past the bound
	created    time.Time

	capMu sync.Mutex
	size  hostSize // last capacity read from the host
}

func newHost(h Host, cfg *Config, dial dialFunc, plan *placement.Planner) *host {
	shown := Redact(h.URI)
	log := cfg.Logger.With("zone", h.Zone, "uri", shown)
	if h.Named {
		log = log.With("host", h.Name)
	}
	return &host{
		zone: h.Zone, name: h.Name, named: h.Named, enforce: h.Enforce, labels: h.Labels, plan: plan,
		uri: h.URI, shown: shown, cfg: cfg, dial: dial,
		log:  log,
		kick: make(chan struct{}, 1), stop: make(chan struct{}),
		done: make(chan struct{}), first: make(chan struct{}),
		lastErr: "not connected yet", since: time.Now(), created: time.Now(),
		calls: newCallSlots(),
	}
}

// loop keeps the host connected: it dials, and after a failure or a loss
// waits with capped exponential backoff (with jitter, so hosts that fell
// together do not redial in lockstep) before dialling again.
func (h *host) loop() {
	defer close(h.done)
	delay := h.cfg.ReconnectMin
	for {
		if !h.isUp() {
			err := h.connect()
			h.markFirst()
			if err != nil {
				wait := delay/2 + rand.N(delay/2+1)
				delay = min(delay*2, h.cfg.ReconnectMax)
				select {
				case <-h.stop:
					return
				case <-time.After(wait):
				}
				continue
			}
			delay = h.cfg.ReconnectMin
		}
		select {
		case <-h.stop:
			return
		case <-h.kick:
		}
	}
}

// markFirst records that the first connection attempt is over (it
// returned, or ran past the call bound): until then the host's zone is
// "connecting", which a mutation may wait for, rather than down.
func (h *host) markFirst() {
	if h.firstDone.CompareAndSwap(false, true) {
		close(h.first)
	}
}

func (h *host) isUp() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conn != nil
}

// connect dials once and installs the connection with its close callback
// and watchdog.
func (h *host) connect() error {
	conn, err := h.dialBounded()
	if errors.Is(err, errHostClosed) {
		return err
	}
	if err != nil {
		err = scrub(err, h.uri)
		if h.setDown(err.Error()) {
			h.log.Warn("libvirt host unreachable", "err", err)
		} else {
			h.log.Debug("libvirt host still unreachable", "err", err)
		}
		return err
	}
	// No libvirt keepalive: libvirt's client (9.0, Debian 12) crashes the
	// process when a keepalive timeout closes a connection while other
	// threads are inside calls on it (TestReconnectUnderCallsReal, built
	// with -tags reallibvirt, reproduces it: SIGSEGV in the RPC client's
	// event loop). The host's own watchdog (watch.go) pings instead, and
	// only marks the link dead: it never closes it under a call.
	if err := conn.RegisterCloseCallback(func(reason libvirt.ConnectCloseReason) {
		// Runs on the event loop thread: closing the connection from here
		// would re-enter libvirt, so hand it to a goroutine.
		go h.drop(conn, fmt.Sprintf("connection closed (%s)", closeReason(reason)))
	}); err != nil {
		h.log.Debug("libvirt close callback not registered", "err", scrub(err, h.uri))
	}
	h.tuneLink(conn)
	choice, err := h.chooseType(&boundConn{h: h, inner: conn})
	if err != nil {
		// A host whose capabilities cannot be read, or that cannot run
		// the domain type asked for, is not usable: every Create would
		// fail with a misleading error. Keep it down and say why.
		closeConn(conn)
		err = scrub(err, h.uri)
		if h.setDown(err.Error()) {
			h.log.Warn("libvirt host refused", "err", err)
		}
		return err
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		closeConn(conn)
		return nil
	}
	h.conn, h.choice, h.lastErr, h.since = conn, choice, "", time.Now()
	h.setConnectedLocked()
	h.mu.Unlock()
	if c, err := h.acquire(); err == nil { // a reference of our own: a drop may race
		h.readSize(c)
		h.release(c)
	}
	go h.watch(conn)
	if choice.Fallback != "" {
		h.log.Warn("kvm is offered but QEMU cannot use it; guests on this host run in qemu (TCG)",
			"domain_type", choice.Type, "reason", choice.Fallback)
	}
	h.log.Info("libvirt host connected", "domain_type", choice.Type)
	return nil
}

// chooseType reads the capabilities and applies --domain-type.
func (h *host) chooseType(conn lvConn) (typeChoice, error) {
	caps, err := readCaps(conn)
	if err != nil {
		return typeChoice{}, err
	}
	return decideDomainType(h.cfg.DomainType, offeredTypes(caps), func() error {
		return probeKVM(conn, h.cfg.Provider)
	})
}

// fallBackToQEMU switches an auto host to qemu (TCG) after a start failed
// because QEMU could not use KVM; it reports whether it switched (false
// when the type was chosen explicitly or is already qemu).
func (h *host) fallBackToQEMU(reason string) bool {
	h.mu.Lock()
	if h.cfg.DomainType == DomainTypeKVM || h.cfg.DomainType == DomainTypeQEMU || h.choice.Type != DomainTypeKVM {
		h.mu.Unlock()
		return false
	}
	h.choice = typeChoice{Type: DomainTypeQEMU, Fallback: reason}
	h.mu.Unlock()
	h.log.Warn("a kvm guest could not start; this host now runs guests in qemu (TCG)", "reason", reason)
	return true
}

// setDown records why the host is down; it reports whether that is news
// (so a host that stays down is not logged at Warn every retry).
func (h *host) setDown(msg string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastErr == msg {
		return false
	}
	h.lastErr, h.since = msg, time.Now()
	return true
}

// drop forgets conn (if it is still the current one), closes our reference
// and wakes the loop to re-dial. Callers that still hold a reference keep
// the handle valid until they release it; their calls fail fast.
func (h *host) drop(conn lvConn, why string) {
	if bc, ok := conn.(*boundConn); ok {
		conn = bc.inner // the host keeps its connection unwrapped
	}
	h.mu.Lock()
	if h.conn != conn {
		h.mu.Unlock()
		return
	}
	h.conn, h.lastErr, h.since = nil, why, time.Now()
	h.setConnectedLocked()
	h.mu.Unlock()
	h.log.Warn("libvirt host connection lost; reconnecting", "why", why)
	select {
	case h.kick <- struct{}{}:
	default:
	}
	// Last: on a frozen daemon, unregistering the close callback waits
	// for libvirt's client lock until the daemon answers again.
	closeConn(conn)
}

// closeConn releases the host's own reference. The close callback holds one
// too, so it is unregistered first.
func closeConn(conn lvConn) {
	_ = conn.UnregisterCloseCallback()
	_, _ = conn.Close()
}

// acquire returns the live connection with a reference of the caller's
// own, which release gives back, or an error wrapping ErrHostUnavailable.
func (h *host) acquire() (lvConn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return nil, h.unavailableLocked()
	}
	if err := h.conn.Ref(); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", h.where(), backend.ErrHostUnavailable, scrub(err, h.uri))
	}
	return &boundConn{h: h, inner: h.conn}, nil
}

func (h *host) release(conn lvConn) {
	if conn != nil {
		_, _ = conn.Close()
	}
}

func (h *host) unavailableLocked() error {
	if !h.firstDone.Load() {
		return fmt.Errorf("%s: %w (since %s)", h.where(), backend.ErrHostConnecting, h.since.UTC().Format(time.RFC3339))
	}
	return fmt.Errorf("%s: %w: %s (since %s)", h.where(), backend.ErrHostUnavailable,
		h.lastErr, h.since.UTC().Format(time.RFC3339))
}

// where names the host in messages: `zone "z" (uri)`, with the host's
// name in a zone of several hosts.
func (h *host) where() string {
	if h.named {
		return fmt.Sprintf("zone %q host %q (%s)", h.zone, h.name, h.shown)
	}
	return fmt.Sprintf("zone %q (%s)", h.zone, h.shown)
}

// setConnectedLocked tells placement whether the host can take machines.
// It runs under h.mu with the change of h.conn, so placement never sees a
// host down that is up (which would refuse a Create as "no room"). Lock
// order: h.mu, then the planner's; the planner never calls out.
func (h *host) setConnectedLocked() {
	up := h.conn != nil
	if h.plan != nil {
		h.plan.Update(h.name, func(p *placement.Host) { p.Connected = up })
	}
}

// observe looks at the outcome of a call on conn and reports whether the
// call failed because of the link rather than the work: a connection that
// is no longer alive (dropped here, so the loop re-dials now rather than
// when the watchdog notices), or an RPC/timeout error on one that is. Such a
// failure is backend.ErrTransient: the engine runs the idempotent call
// again once the host is back.
func (h *host) observe(conn lvConn, err error) bool {
	if err == nil || conn == nil {
		return false
	}
	if alive, aerr := conn.IsAlive(); aerr == nil && alive {
		return isCode(err, libvirt.ERR_RPC, libvirt.ERR_NO_CONNECT, libvirt.ERR_INVALID_CONN, libvirt.ERR_OPERATION_TIMEOUT)
	}
	h.drop(conn, "call failed: "+scrub(err, h.uri).Error())
	return true
}

// ready is ZoneReady for this host: cheap, no RPC.
func (h *host) ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return h.unavailableLocked()
	}
	return nil
}

func (h *host) domainType() typeChoice {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.choice
}

// close stops the loop and closes the connection.
func (h *host) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	conn := h.conn
	h.conn, h.lastErr = nil, "closed"
	h.setConnectedLocked()
	h.mu.Unlock()
	close(h.stop)
	select {
	case <-h.done:
	case <-time.After(5 * time.Second): // a dial stuck in the network; it closes its conn itself
	}
	if conn == nil {
		return
	}
	// Closing the last reference says goodbye to the daemon: an RPC,
	// which a frozen daemon never answers. Shutdown does not wait for it.
	closed := make(chan struct{})
	go func() { closeConn(conn); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		h.log.Warn("libvirt host did not answer the close; not waiting for it")
	}
}

func closeReason(r libvirt.ConnectCloseReason) string {
	switch r {
	case libvirt.CONNECT_CLOSE_REASON_ERROR:
		return "error"
	case libvirt.CONNECT_CLOSE_REASON_EOF:
		return "eof"
	case libvirt.CONNECT_CLOSE_REASON_KEEPALIVE:
		return "keepalive timeout"
	case libvirt.CONNECT_CLOSE_REASON_CLIENT:
		return "closed by client"
	}
	return fmt.Sprintf("reason %d", int(r))
}
