package hostconn

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// How a link to a host that stops answering is cut, so that the calls
// waiting on it return (the bound in bound.go only frees their callers):
//
//   - libvirt's own keepalive, with a client library that has the fix for
//     CVE-2024-4418 (10.4.0 and later: the image carries 11.3 from
//     bookworm-backports). Older clients crash the process when a
//     keepalive timeout closes a connection while other threads are
//     inside calls on it (TestReconnectUnderCallsReal), so there the
//     keepalive stays off and the provider's watchdog (watch.go) marks the
//     host down instead.
//   - Whatever the client, TCP_USER_TIMEOUT on the connection's socket
//     (sockopt.go): the kernel aborts a connection whose data has gone
//     unacknowledged that long (the watchdog's pings keep data in flight),
//     which fails every call on it. It covers TLS and libssh hosts; an
//     ssh host's socket belongs to the ssh child process.
//
// A daemon that is alive but slow (it answers pings, not the call) is
// covered by the bound alone: the call keeps its thread until the daemon
// answers, within the host's slot limit.

// keepaliveFixed is the first libvirt client without CVE-2024-4418.
const keepaliveFixed = 10_004_000

var clientVersion = sync.OnceValues(func() (uint32, error) { return libvirt.GetVersion() })

// keepaliveSafe reports whether the client library in this process can
// run libvirt's keepalive without risking the crash.
func keepaliveSafe() bool {
	v, err := clientVersion()
	return err == nil && v >= keepaliveFixed
}

// LogLinkMode says once, at start, how dead links are cut with this client
// (cfg: the hosts' bounds).
func LogLinkMode(log *slog.Logger, cfg Config) {
	v, err := clientVersion()
	switch {
	case err != nil:
		log.Warn("libvirt client version unknown; libvirt keepalive off (watchdog pings and TCP timeouts only)", "err", err)
	case v >= keepaliveFixed:
		log.Info("libvirt keepalive on", "client", virt.Version(v),
			"interval", fmt.Sprintf("%ds", cfg.KeepAliveSecs), "count", cfg.KeepAliveCount,
			"call_timeout", cfg.CallTimeout.String())
	default:
		log.Warn("libvirt client predates 10.4.0 (CVE-2024-4418: its keepalive can crash the process); keepalive off: a silent host is found by the provider's pings, and a call still waiting on it is abandoned at --libvirt-call-timeout and keeps its thread until the kernel's TCP_USER_TIMEOUT cuts the link (ssh:// hosts: until TCP gives up). Run with libvirt0 10.4 or later (the image has 11.3)",
			"client", virt.Version(v), "call_timeout", cfg.CallTimeout.String())
	}
}

// tuneLink turns on what cuts a dead link on a fresh connection (cs: its
// call slots; win: the sockets its dial opened) and says whether its
// socket has the TCP timeouts.
func (h *Host) tuneLink(conn virt.Conn, cs *callSlots, win dialWindow) linkState {
	if keepaliveSafe() {
		bc := &boundConn{h: h, cs: cs, inner: conn}
		if err := bc.SetKeepAlive(h.cfg.KeepAliveSecs, h.cfg.KeepAliveCount); err != nil {
			h.log.Warn("libvirt keepalive not enabled on this connection", "err", virt.Scrub(err, h.uri))
		}
	}
	if !networkURI(h.uri) {
		return linkLocal
	}
	n, err := setLinkTimeouts(h.uri, h.cfg.CallTimeout, win)
	if n > 0 {
		h.log.Debug("TCP timeouts set on the libvirt connection", "sockets", n)
		return linkTuned
	}
	why := "no socket of this process is connected to the URI's host and port (another address of the name, an ssh Port or ProxyJump?)"
	switch {
	case sshChild(h.uri):
		why = "the ssh transport's socket belongs to the ssh child process (use qemu+libssh:// for the timeouts)"
	case err != nil:
		why = virt.Scrub(err, h.uri).Error()
	}
	h.log.Warn("libvirt connection runs without TCP timeouts on its socket: a dead link is found only by keepalive or the watchdog, and calls waiting on it run past --libvirt-call-timeout and keep their threads until TCP gives up (about 15 minutes)",
		"why", why, "call_timeout", h.cfg.CallTimeout.String())
	return linkUntuned
}

var errHostClosed = errors.New("host closed")

// dialBounded dials, waiting at most the call bound. A dial past it leaves
// the host down with that cause, and the first attempt over, while it
// waits on (a host has one dial at a time): the connection it may still
// make is installed then, or closed if the host was closed meanwhile. It
// also returns the sockets the dial opened (sockopt.go).
func (h *Host) dialBounded() (virt.Conn, dialWindow, error) {
	type result struct {
		conn virt.Conn
		win  dialWindow
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		w := beginDial()
		c, err := h.dial(h.uri)
		ch <- result{c, w.end(), err}
	}()
	abandon := func() (virt.Conn, dialWindow, error) {
		go func() {
			if r := <-ch; r.conn != nil {
				closeConn(r.conn)
			}
		}()
		return nil, dialWindow{}, errHostClosed
	}
	timer := time.NewTimer(h.cfg.CallTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.conn, r.win, r.err
	case <-h.stop:
		return abandon()
	case <-timer.C:
	}
	if h.setDown(fmt.Sprintf("connect did not finish within %s (--libvirt-call-timeout)", h.cfg.CallTimeout)) {
		h.log.Warn("libvirt host does not answer the connect; still waiting for it", "bound", h.cfg.CallTimeout.String())
	}
	h.markFirst()
	select {
	case r := <-ch:
		return r.conn, r.win, r.err
	case <-h.stop:
		return abandon()
	}
}
