package lifecycle

import (
	"context"
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/internal/backoff"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Bounds of the pause between two attempts of a backend call that failed
// transiently; the host reconnects on its own meanwhile.
const (
	retryMin = 500 * time.Millisecond
	retryMax = 10 * time.Second
)

// lastFault is the most recent transient error of a run, for the timeout
// message: "timed out after 3m (last error: ...)" says what kept it from
// finishing.
type lastFault struct {
	mu  sync.Mutex
	err error
}

func (f *lastFault) set(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *lastFault) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// retryDelay is the backoff between tries of a backend call that failed
// for a transient reason: from --retry-min (RetryMin) doubling to retryMax.
func (e *Engine) retryDelay() *backoff.Backoff {
	first := e.cfg.RetryMin
	if first <= 0 {
		first = retryMin
	}
	return backoff.New(first, retryMax)
}

// executeRetrying runs the backend call and runs it again after a
// transient fault (backend.IsTransient), with backoff, until it succeeds,
// fails for real, or ctx (the transition's deadline) ends. Backend methods
// are idempotent by contract, so a host that drops or freezes mid-call
// costs time, never the machine.
func (e *Engine) executeRetrying(ctx context.Context, m *record.Machine, blob []byte, fault *lastFault) result {
	delay := e.retryDelay()
	st := &attemptState{resumed: m.OpKind == record.OpCreate && m.HostName != ""}
	for attempt := 1; ; attempt++ {
		r := e.execute(ctx, m, blob, st)
		if r.err == nil || !backend.IsTransient(r.err) || ctx.Err() != nil {
			return r
		}
		fault.set(r.err)
		e.log.Warn("transient fault; the call runs again within the transition's deadline", "machine", m.ID,
			"op", m.OperationID, "kind", string(m.OpKind), "attempt", attempt, "err", r.err)
		if delay.Wait(ctx) != nil {
			return r
		}
	}
}
