package hostconn

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"github.com/bigfleet/libvirt-provider/internal/backoff"
)

// eventLoop starts libvirt's default event loop once per process. Close
// callbacks only work while it runs, and it must be registered
// before the first connection is opened.
var eventLoop sync.Once

// StartEventLoop runs libvirt's default event loop, once per process; call
// it before any host starts.
func StartEventLoop(log *slog.Logger) {
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

// loop keeps the host connected: it dials, and after a failure or a loss
// waits with capped exponential backoff (with jitter, so hosts that fell
// together do not redial in lockstep) before dialling again.
func (h *Host) loop() {
	defer close(h.done)
	delay := backoff.New(h.cfg.ReconnectMin, h.cfg.ReconnectMax)
	delay.Jitter = true
	for {
		if !h.isUp() {
			err := h.connect()
			h.markFirst()
			if err != nil {
				wait := delay.Next()
				select {
				case <-h.stop:
					return
				case <-time.After(wait):
				}
				continue
			}
			delay.Reset()
		}
		select {
		case <-h.stop:
			return
		case <-h.kick:
		}
	}
}

// connectBudget is added to the call bound for what a connect reads and
// probes (capabilities, the KVM probe guest): a daemon that re-probes QEMU
// on every call took 42 s for it on a host whose /dev/kvm QEMU cannot use.
// Nothing waits on a connect but the host's own loop.
const connectBudget = 2 * time.Minute

// connect dials once and installs the connection with its close callback
// and watchdog.
func (h *Host) connect() error {
	conn, win, err := h.dialBounded()
	if errors.Is(err, errHostClosed) {
		return err
	}
	if err != nil {
		err = virt.Scrub(err, h.uri)
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
		go h.Drop(conn, fmt.Sprintf("connection closed (%s)", closeReason(reason)))
	}); err != nil {
		h.log.Debug("libvirt close callback not registered", "err", virt.Scrub(err, h.uri))
	}
	// A new connection gets call slots of its own: calls still inside
	// libvirt on a lost one keep (and give back) that one's.
	cs := newCallSlots()
	link := h.tuneLink(conn, cs, win)
	choice, err := h.chooseType(&boundConn{h: h, cs: cs, inner: conn, extra: connectBudget})
	if err != nil {
		// A host whose capabilities cannot be read, or that cannot run
		// the domain type asked for, is not usable: every Create would
		// fail with a misleading error. Keep it down and say why.
		closeConn(conn)
		err = virt.Scrub(err, h.uri)
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
	h.conn, h.calls, h.link, h.choice, h.lastErr, h.since = conn, cs, link, choice, "", time.Now()
	h.setConnectedLocked()
	h.mu.Unlock()
	if c, err := h.Acquire(); err == nil { // a reference of our own: a drop may race
		h.ReadSize(c)
		h.Release(c)
	}
	go h.watch(conn, cs)
	if choice.Fallback != "" {
		h.log.Warn("kvm is offered but QEMU cannot use it; guests on this host run in qemu (TCG)",
			"domain_type", choice.Type, "reason", choice.Fallback)
	}
	h.log.Info("libvirt host connected", "domain_type", choice.Type)
	return nil
}

// Drop forgets conn (if it is still the current one), closes our reference
// and wakes the loop to re-dial. Callers that still hold a reference keep
// the handle valid until they release it; their calls fail fast.
func (h *Host) Drop(conn virt.Conn, why string) {
	if bc, ok := conn.(*boundConn); ok {
		conn = bc.inner // the host keeps its connection unwrapped
	}
	h.mu.Lock()
	if h.conn != conn {
		h.mu.Unlock()
		return
	}
	h.conn, h.lastErr, h.since = nil, why, time.Now()
	inside := len(h.calls.slots)
	h.setConnectedLocked()
	h.mu.Unlock()
	// Calls still inside libvirt on the lost connection keep its slots
	// (and their threads, within MaxThreadsPerHost) until libvirt returns
	// them; the next connection starts with slots of its own.
	h.log.Warn("libvirt host connection lost; reconnecting", "why", why,
		"calls_inside", inside, "abandoned_inside", h.Abandoned())
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
func closeConn(conn virt.Conn) {
	_ = conn.UnregisterCloseCallback()
	_, _ = conn.Close()
}

// Close stops the loop and closes the connection, within a bound (5 s
// for the loop, 2 s for the goodbye RPC), so hosts close in parallel.
func (h *Host) Close() {
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
