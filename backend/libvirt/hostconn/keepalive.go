package hostconn

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"libvirt.org/go/libvirt"
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
		log.Info("libvirt keepalive on", "client", Version(v),
			"interval", fmt.Sprintf("%ds", cfg.KeepAliveSecs), "count", cfg.KeepAliveCount,
			"call_timeout", cfg.CallTimeout.String())
	default:
		log.Warn("libvirt client predates 10.4.0 (CVE-2024-4418: its keepalive can crash the process); keepalive off: a silent host is found by the provider's pings, and a call still waiting on it is abandoned at --libvirt-call-timeout and keeps its thread until the kernel's TCP_USER_TIMEOUT cuts the link (ssh:// hosts: until TCP gives up). Run with libvirt0 10.4 or later (the image has 11.3)",
			"client", Version(v), "call_timeout", cfg.CallTimeout.String())
	}
}

// tuneLink turns on what cuts a dead link on a fresh connection.
func (h *Host) tuneLink(conn Conn) {
	if keepaliveSafe() {
		bc := &boundConn{h: h, inner: conn}
		if err := bc.SetKeepAlive(h.cfg.KeepAliveSecs, h.cfg.KeepAliveCount); err != nil {
			h.log.Warn("libvirt keepalive not enabled on this connection", "err", Scrub(err, h.uri))
		}
	}
	n, err := setLinkTimeouts(h.uri, h.cfg.CallTimeout)
	if err != nil {
		h.log.Debug("TCP timeouts not set on the libvirt connection", "err", Scrub(err, h.uri))
		return
	}
	h.log.Debug("TCP timeouts set on the libvirt connection", "sockets", n)
}

var errHostClosed = errors.New("host closed")

// dialBounded dials, waiting at most the call bound. A dial past it leaves
// the host down with that cause, and the first attempt over, while it
// waits on (a host has one dial at a time): the connection it may still
// make is installed then, or closed if the host was closed meanwhile.
func (h *Host) dialBounded() (Conn, error) {
	type result struct {
		conn Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := h.dial(h.uri)
		ch <- result{c, err}
	}()
	abandon := func() (Conn, error) {
		go func() {
			if r := <-ch; r.conn != nil {
				closeConn(r.conn)
			}
		}()
		return nil, errHostClosed
	}
	timer := time.NewTimer(h.cfg.CallTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.conn, r.err
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
		return r.conn, r.err
	case <-h.stop:
		return abandon()
	}
}
