package hostconn

import (
	"fmt"
	"time"
)

// The watchdog replaces libvirt's keepalive (see connect): every
// KeepAliveSecs it sends the daemon one cheap RPC on the connection, and
// when no answer comes within KeepAliveSecs*KeepAliveCount it declares the
// link dead: the host is reported down (so mutations for its zone get
// Unavailable) and the loop re-dials. It only drops the host's reference:
// a call still inside libvirt on the old connection keeps it valid and
// returns when the daemon answers or the socket dies, and the last
// reference closes it then.

// pingTimeout is how long the daemon may stay silent before its link is
// declared dead.
func (h *Host) pingTimeout() time.Duration {
	return time.Duration(h.cfg.KeepAliveSecs) * time.Second * time.Duration(h.cfg.KeepAliveCount)
}

// watch pings conn until it is no longer the host's connection.
func (h *Host) watch(conn Conn) {
	tick := time.NewTicker(time.Duration(h.cfg.KeepAliveSecs) * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-tick.C:
		}
		if !h.current(conn) {
			return
		}
		if err := h.ping(conn); err != nil {
			h.Drop(conn, err.Error())
			return
		}
	}
}

// current reports whether conn is still the host's live connection.
func (h *Host) current(conn Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conn == conn
}

// ping asks the daemon for its version (an RPC, unlike IsAlive) with its
// own reference, so the call may outlive the verdict safely. A call that
// fails on a link libvirt still calls alive is an answer: the daemon is
// there.
func (h *Host) ping(conn Conn) error {
	if err := conn.Ref(); err != nil {
		return fmt.Errorf("ping: %v", Scrub(err, h.uri))
	}
	answer := make(chan error, 1)
	go func() {
		defer func() { _, _ = conn.Close() }()
		_, err := conn.GetLibVersion()
		answer <- err
	}()
	wait := h.pingTimeout()
	select {
	case err := <-answer:
		if err == nil {
			return nil
		}
		if alive, aerr := conn.IsAlive(); aerr == nil && alive {
			return nil
		}
		return fmt.Errorf("ping failed: %v", Scrub(err, h.uri))
	case <-time.After(wait):
		return fmt.Errorf("libvirtd did not answer for %s", wait)
	case <-h.stop:
		return nil
	}
}
