package lifecycle

import (
	"context"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// readAddresses asks a backend that can (backend.GuestAddresser) for the
// guest's addresses once its Configure succeeded. That is the first time
// the provider talks to the agent after a Create (Create only waits for the
// domain to run), and the agent has just answered, so it costs one agent
// round trip and no wait; each Configure refreshes them. A failure leaves
// them unknown and never fails the Configure.
func (e *Engine) readAddresses(ctx context.Context, id string, pl backend.Placement) []string {
	ga := e.can.GuestAddresser
	if ga == nil {
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
