package lifecycle

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Sweep makes every transitional record reach a stable state when its run
// is gone. Parked outcomes (whose commit gave up while the store was down)
// are recorded first: the real outcome always beats a FAILED. A record
// still transitional past its deadline with no live run and no parked
// outcome is finished FAILED, saying so. Records with a live run are never
// touched: their run owns them. It returns how many records it changed.
func (e *Engine) Sweep() int {
	changed := 0
	e.parkMu.Lock()
	parked := slices.Collect(maps.Values(e.parked))
	e.parkMu.Unlock()
	for _, p := range parked {
		err := e.finishOnce(p.op, p.r)
		if err == nil || err == errStale {
			e.parkMu.Lock()
			delete(e.parked, p.op.OperationID)
			e.parkMu.Unlock()
			if err == nil {
				changed++
			}
		}
	}
	now := e.cfg.Now()
	for _, id := range e.idx.Transitional() {
		// A cheap look first: most transitional records are running.
		if m, ok := e.idx.Get(id); !ok || m.OpDeadline.After(now) || e.runs.Has(m.OperationID) {
			continue
		}
		if e.sweepOne(id, now) {
			changed++
		}
	}
	if changed > 0 {
		e.log.Info("sweep finished transitional records", "changed", changed)
	}
	return changed
}

func (e *Engine) sweepOne(id string, now time.Time) bool {
	gone := record.Expect{Holds: func(cur *record.Machine) bool {
		return cur.State.Transitional() && !cur.OpDeadline.After(now) &&
			!e.runs.Has(cur.OperationID) && !e.isParked(cur.OperationID)
	}}
	return e.record(id, gone, func(cur *record.Machine) result {
		return result{err: &timeoutError{msg: fmt.Sprintf("%s timed out: its deadline (%s) passed and its outcome could not be recorded",
			cur.OpKind, cur.OpDeadline.UTC().Format(time.RFC3339))}}
	}) == nil
}
