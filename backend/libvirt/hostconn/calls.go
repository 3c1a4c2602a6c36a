package hostconn

import (
	"fmt"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// Acquire returns the live connection with a reference of the caller's
// own, which Release gives back, or an error wrapping ErrHostUnavailable
// (ErrHostConnecting before the first attempt is over).
func (h *Host) Acquire() (virt.Conn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return nil, h.unavailableLocked()
	}
	if err := h.conn.Ref(); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", h.Where(), backend.ErrHostUnavailable, virt.Scrub(err, h.uri))
	}
	return &boundConn{h: h, cs: h.calls, inner: h.conn}, nil
}

// Release gives back a reference Acquire took.
func (h *Host) Release(conn virt.Conn) {
	if conn != nil {
		_, _ = conn.Close()
	}
}

// With runs fn on the host's connection, holding a reference for the
// call, and lets the host see the outcome (to notice a lost connection).
// Every call on conn is bounded (bound.go). An error is scrubbed of the
// URI's secrets; one of the link rather than the work also matches
// backend.ErrTransient.
func (h *Host) With(fn func(conn virt.Conn) error) error {
	conn, err := h.Acquire()
	if err != nil {
		return err
	}
	defer h.Release(conn)
	err = fn(conn)
	if h.observe(conn, err) {
		return linkFault{virt.Scrub(err, h.uri)}
	}
	return virt.Scrub(err, h.uri)
}

// linkFault is an error of the path to the host, not of the work: its text
// is the cause's, and it also matches backend.ErrTransient.
type linkFault struct{ error }

func (e linkFault) Unwrap() []error { return []error{e.error, backend.ErrTransient} }

// WithDomain looks the domain up and runs fn on it; the handle is freed
// after. A failed lookup says so (a missing domain still tests as
// libvirt's ERR_NO_DOMAIN).
func (h *Host) WithDomain(name string, fn func(conn virt.Conn, dom virt.Domain) error) error {
	return h.With(func(conn virt.Conn) error {
		dom, err := conn.LookupDomainByName(name)
		if err != nil {
			return fmt.Errorf("look up domain %s: %w", name, err)
		}
		defer dom.Free()
		return fn(conn, dom)
	})
}

// observe looks at the outcome of a call on conn and reports whether the
// call failed because of the link rather than the work: a connection that
// is no longer alive (dropped here, so the loop re-dials now rather than
// when the watchdog notices), or an RPC/timeout error on one that is. Such a
// failure is backend.ErrTransient: the engine runs the idempotent call
// again once the host is back.
func (h *Host) observe(conn virt.Conn, err error) bool {
	if err == nil || conn == nil {
		return false
	}
	if alive, aerr := conn.IsAlive(); aerr == nil && alive {
		return isCode(err, libvirt.ERR_RPC, libvirt.ERR_NO_CONNECT, libvirt.ERR_INVALID_CONN, libvirt.ERR_OPERATION_TIMEOUT)
	}
	h.Drop(conn, "call failed: "+virt.Scrub(err, h.uri).Error())
	return true
}

func isCode(err error, codes ...libvirt.ErrorNumber) bool { return virt.IsCode(err, codes...) }

func isNoDomain(err error) bool { return isCode(err, libvirt.ERR_NO_DOMAIN) }

// isNotRunning: destroying a domain that is already off is not a failure.
func isNotRunning(err error) bool { return isCode(err, libvirt.ERR_OPERATION_INVALID) }

func message(err error) string { return virt.Message(err) }
