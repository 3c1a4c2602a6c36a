package lifecycle

import (
	"context"
	"strings"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// addressesNote prefixes the guest's addresses in a Configure's history
// entry (Transition.Note), which the store keeps with the machine.
const addressesNote = "addresses: "

// readAddresses asks a backend that can (backend.GuestAddresser) for the
// guest's addresses once its Configure succeeded. That is the first time
// the provider talks to the agent after a Create (Create only waits for the
// domain to run), and the agent has just answered, so it costs one agent
// round trip and no wait; each Configure refreshes them. A failure leaves
// them unknown and never fails the Configure.
func (e *Engine) readAddresses(ctx context.Context, id string, pl backend.Placement) []string {
	ga, ok := e.be.(backend.GuestAddresser)
	if !ok {
		return nil
	}
	// The reading must never cost the Configure its deadline (a run that
	// outlives it ends timed_out): it ends a little before (a tenth of
	// what is left, at most a second), and is skipped when too little is.
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left < 100*time.Millisecond {
			return nil
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, left-min(left/10, time.Second))
		defer cancel()
	}
	addrs, err := ga.GuestAddresses(ctx, id, pl)
	if err != nil {
		e.log.Warn("cannot read the guest's addresses; left unknown", "machine", id, "err", err)
		return nil
	}
	return addrs
}

// noteAddresses is the history note of a Configure that read addresses.
func noteAddresses(addrs []string) string {
	if len(addrs) == 0 {
		return ""
	}
	return addressesNote + strings.Join(addrs, ", ")
}

// GuestAddresses are the guest's addresses as its latest successful
// Configure read them ("eth0 192.0.2.10/24"), from that transition's
// history entry, so they persist with the history and need no field of
// their own in the store's record. Nil while unknown: never configured
// since its Create, the reading failed, or the agent refused it. For
// people (admin API, libvirtctl): BigFleet's wire has no field for them.
func (m *Machine) GuestAddresses() []string {
	for i := len(m.History) - 1; i >= 0; i-- {
		h := &m.History[i]
		switch {
		case h.Kind == OpCreate, (h.Kind == OpDelete || h.Kind == OpRelease) && h.Outcome == "succeeded":
			return nil // a new VM or none: an earlier life's addresses are not its
		case h.Kind == OpConfigure && h.Outcome == "succeeded":
			s, ok := strings.CutPrefix(h.Note, addressesNote)
			if !ok || s == "" {
				return nil
			}
			return strings.Split(s, ", ")
		}
	}
	return nil
}
