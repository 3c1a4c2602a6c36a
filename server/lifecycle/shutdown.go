package lifecycle

import (
	"context"
	"time"
)

// Close stops the engine: Shutdown bounded by Config.ShutdownGrace (0, the
// default, cancels in-flight transitions at once, as a crash would).
func (e *Engine) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.ShutdownGrace)
	defer cancel()
	e.Shutdown(ctx)
}

// Shutdown stops the engine gracefully. From its start, mutations are
// refused with Unavailable and reconcile and the sweep stop, while reads
// keep working and transitions already running may finish (their outcome
// is recorded as usual) until ctx ends. Then whatever still runs is
// cancelled and stays transitional in the store, to be resumed by the next
// Start. Later calls wait for the first to complete.
func (e *Engine) Shutdown(ctx context.Context) {
	e.stopOnce.Do(func() {
		e.StopAccepting()
		if err := e.runs.Wait(ctx); err != nil {
			e.log.Warn("shutdown bound reached; cancelling in-flight transitions (resumed at next start)",
				"running", e.runs.Len())
		}
		e.bgMu.Lock()
		e.closed.Store(true)
		e.bgMu.Unlock()
		e.bgCancel()
		e.waitBackground()
	})
}

// stragglerWait bounds the wait for background work after it is
// cancelled. A backend call that cannot be cancelled (a libvirt call to a
// frozen daemon waits for the daemon) must not hold the process: what it
// was doing is transitional in the store and resumed by the next Start,
// exactly as after a crash.
var stragglerWait = 3 * time.Second

func (e *Engine) waitBackground() {
	done := make(chan struct{})
	go func() { e.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(stragglerWait):
		e.log.Warn("shutdown: work still inside the backend after cancel; not waiting for it (resumed at next start)",
			"running", e.runs.Len())
	}
}

// StopAccepting is the first step of Shutdown, for callers that must order
// it before other steps: from now on mutations are refused with
// Unavailable, and reconcile and the sweep stop. Reads and transitions
// already running carry on. It is idempotent.
func (e *Engine) StopAccepting() {
	e.bgMu.Lock()
	e.stopping.Store(true)
	e.bgMu.Unlock()
	e.recCancel()
}

// acceptingKey stands in the run set for mutations being accepted, so a
// graceful stop waits for them too (and then for the runs they launch):
// an acknowledged transition is never dropped by a stop that did not use
// its whole bound.
const acceptingKey = "\x00accepting"

// beginAccept registers a mutation about to be accepted, unless a stop has
// begun. Registration and StopAccepting are ordered by bgMu, so after
// StopAccepting every mutation is either counted or refused.
func (e *Engine) beginAccept() bool {
	e.bgMu.RLock()
	defer e.bgMu.RUnlock()
	if e.stopping.Load() {
		return false
	}
	e.runs.Add(acceptingKey)
	return true
}
