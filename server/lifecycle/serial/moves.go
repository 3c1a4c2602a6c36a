package serial

import (
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// MoveHolds are the machines a live migration holds. A migration keeps
// the machine's state and operation id (BigFleet's idempotency hangs on
// them), so the hold lives here, in memory, instead of in the record:
// while it lasts no Create/Configure/Drain/Delete is accepted for the
// machine and reconcile passes it by. A restart drops it with the
// migration itself (the provider drives it), and reconcile then finds the
// VM on whichever host kept it running.
type MoveHolds struct {
	mu sync.Mutex
	m  map[string]*moveHold
}

type moveHold struct {
	to    string    // the host asked for ("" while placement decides)
	ended time.Time // zero while the migration runs
}

// keepEnded is how long a finished migration still turns reconcile away:
// a listing taken before it ended shows the VM where it no longer is.
const keepEnded = 10 * time.Minute

// Take holds id for a migration, unless one holds it already.
func (h *MoveHolds) Take(id, to string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]*moveHold{}
	}
	for k, v := range h.m {
		if !v.ended.IsZero() && now.Sub(v.ended) > keepEnded {
			delete(h.m, k)
		}
	}
	if v := h.m[id]; v != nil && v.ended.IsZero() {
		return false
	}
	h.m[id] = &moveHold{to: to}
	return true
}

// End releases the hold of id's migration.
func (h *MoveHolds) End(id string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v := h.m[id]; v != nil {
		v.ended = now
	}
}

// Refusal is the error for a transition asked while id is migrating:
// Unavailable, which BigFleet retries; the machine itself is fine.
func (h *MoveHolds) Refusal(id string) *record.Error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v := h.m[id]; v != nil && v.ended.IsZero() {
		return record.Errorf(record.CodeUnavailable, "machine %q is being live-migrated to another host of its zone (an admin MigrateMachine); retry when it finishes", id)
	}
	return nil
}

// Skip tells reconcile to pass id by: it is migrating, or its migration
// ended after the hosts were listed at listedAt.
func (h *MoveHolds) Skip(id string, listedAt time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := h.m[id]
	return v != nil && (v.ended.IsZero() || !v.ended.Before(listedAt))
}

// Target is the host id's migration asked for, or "(placement)" when the
// zone's placement chooses it.
func (h *MoveHolds) Target(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v := h.m[id]; v != nil && v.to != "" {
		return v.to
	}
	return "(placement)"
}
