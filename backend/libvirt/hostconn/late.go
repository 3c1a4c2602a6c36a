package hostconn

import (
	"fmt"
	"strings"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// An abandoned call is not undone: libvirt may still carry it out after
// its caller was told it failed (an abandoned migration can finish after
// the destination's booking was released, a define or start can land after
// the transition was retried). Its late success is neither trusted nor
// lost: for a call that changes the host it is logged at WARN and the
// owner is asked for a reconcile pass (Config.OnLateResult), which judges
// the host as it now is.

// changesHost names the calls whose success changes the host (the first
// word of the call's name, as boundconn.go gives it).
var changesHost = map[string]bool{
	"DomainDefineXML": true, "DomainCreateXML": true, "Create": true, "Destroy": true,
	"Undefine": true, "SetMetadata": true, "Migrate3": true, "AbortJob": true, "Resume": true,
	"StorageVolCreateXML": true, "volume": true, // volume upload, volume Delete
}

// heldBack is a call that changes the host, refused by Config.MayChange
// before it reached libvirt: transient, the engine runs it again later.
type heldBack struct {
	where, call string
	why         error
}

func (e heldBack) Error() string {
	return fmt.Sprintf("%s: %s not started: %v", e.where, e.call, e.why)
}

func (e heldBack) Unwrap() []error { return []error{e.why, backend.ErrTransient} }

// mayStart refuses a call that changes the host while Config.MayChange
// says no. An abort is never held back: it is how a change is stopped.
// It runs before every call: the gate is asked first (an atomic load when
// it says yes), and the call's name is parsed only when it says no.
func (h *Host) mayStart(call string) error {
	if h.cfg.MayChange == nil {
		return nil
	}
	err := h.cfg.MayChange()
	if err == nil || !changes(call) || strings.HasPrefix(call, "AbortJob") {
		return nil
	}
	return heldBack{h.Where(), call, err}
}

// changes reports whether call changes the host when it succeeds.
func changes(call string) bool {
	first, rest, _ := strings.Cut(call, " ")
	if first == "volume" {
		return strings.HasPrefix(rest, "upload") || strings.HasPrefix(rest, "Delete")
	}
	return changesHost[first]
}

// lateResult is told the outcome of an abandoned call once libvirt
// returned it (after took).
func (h *Host) lateResult(call string, err error, took time.Duration) {
	if !changes(call) {
		h.log.Debug("abandoned libvirt call returned", "call", call, "took", took.Round(time.Millisecond).String())
		return
	}
	if err != nil {
		h.log.Info("abandoned libvirt call returned with an error", "call", call,
			"took", took.Round(time.Millisecond).String(), "err", virt.Scrub(err, h.uri))
		return
	}
	h.log.Warn("libvirt call returned after it was abandoned; reconcile will judge its effect", "call", call,
		"host", h.cfg.Name, "took", took.Round(time.Millisecond).String())
	if h.cfg.OnLateResult != nil {
		h.cfg.OnLateResult(call)
	}
}
