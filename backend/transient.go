package backend

import "errors"

// ErrTransient marks a failure of the path to a host rather than of the
// work itself: the connection dropped or the daemon stopped answering in
// the middle of a call, or the guest agent stopped answering part-way
// through a protocol it had started. Backend methods are idempotent, so
// the engine runs the call again (after the host is back) until the
// transition's deadline, instead of failing a machine that is fine.
var ErrTransient = errors.New("transient host fault")

// IsTransient reports whether err is worth retrying within the deadline:
// ErrTransient, or ErrHostUnavailable (the host is down right now).
func IsTransient(err error) bool {
	return errors.Is(err, ErrTransient) || errors.Is(err, ErrHostUnavailable)
}
