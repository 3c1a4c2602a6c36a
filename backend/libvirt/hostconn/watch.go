package hostconn

import (
	"errors"
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
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

// watch pings conn (cs: its call slots) until it is no longer the
// host's connection.
func (h *Host) watch(conn virt.Conn, cs *callSlots) {
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
		if err := h.ping(conn, cs); err != nil {
			h.Drop(conn, err.Error())
			return
		}
	}
}

// current reports whether conn is still the host's live connection.
func (h *Host) current(conn virt.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conn == conn
}

// ping asks the daemon for its version (an RPC, unlike IsAlive) like any
// other call (bound.go): with its own reference, so the call may outlive
// the verdict safely, on a thread the host's cap counts, and through the
// connection's one ping slot, so at most one ping is ever inside libvirt
// per connection however long the daemon stays silent. A call that fails
// on a link libvirt still calls alive is an answer: the daemon is there.
func (h *Host) ping(conn virt.Conn, cs *callSlots) error {
	wait := h.pingTimeout()
	_, err := boundedIn(h, cs.ping, conn, "ping (GetLibVersion)", wait, conn.GetLibVersion)
	var ct *CallTimeoutError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ct) && ct.Busy:
		return fmt.Errorf("libvirtd did not answer for %s: %s", wait, ct.full)
	case errors.As(err, &ct):
		return fmt.Errorf("libvirtd did not answer for %s", wait)
	}
	if alive, aerr := conn.IsAlive(); aerr == nil && alive {
		return nil
	}
	return fmt.Errorf("ping failed: %v", virt.Scrub(err, h.uri))
}
