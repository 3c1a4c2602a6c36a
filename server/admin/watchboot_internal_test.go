package admin

import (
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// bootBackend is a backend whose guests' boot statuses the test sets.
type bootBackend struct {
	backend.Backend
	mu sync.Mutex
	st map[string]backend.BootStatus
}

func (b *bootBackend) BootStatus(id string) (backend.BootStatus, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.st[id]
	return st, ok
}

func (b *bootBackend) set(id string, st *backend.BootStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st == nil {
		delete(b.st, id)
		return
	}
	b.st[id] = *st
}

// bootEngine is an Engine that only has a backend.
type bootEngine struct {
	Engine
	be backend.Backend
}

func (e bootEngine) Backend() backend.Backend { return e.be }

// TestBootChangesWithoutRevision: a watch re-sends an IDLE machine whose
// guest's boot status changed with no new record (a restarted guest that
// finished booting), and only then; a CONFIGURED machine is not looked at.
func TestBootChangesWithoutRevision(t *testing.T) {
	be := &bootBackend{st: map[string]backend.BootStatus{}}
	s := &Service{eng: bootEngine{be: be}}
	tr := s.newBootTrack()
	now := time.Now()
	idle := record.Machine{ID: "m1", State: record.Idle, Revision: 7}
	conf := record.Machine{ID: "m2", State: record.Configured, Revision: 9}
	be.set("m1", &backend.BootStatus{Phase: backend.BootBooting, Reason: "started again by reconcile"})
	be.set("m2", &backend.BootStatus{Phase: backend.BootBooting, Reason: "stale"})
	for _, m := range []record.Machine{idle, conf} {
		v := s.machineView(m, now)
		tr.note(m, v)
	}
	if got := s.bootChanges(tr, now); len(got) != 0 {
		t.Fatalf("nothing changed, yet %d re-sent", len(got))
	}
	be.set("m1", &backend.BootStatus{Phase: backend.BootBooting, Reason: "waiting for network-online.target"})
	got := s.bootChanges(tr, now)
	if len(got) != 1 || got[0].GetBootReason() != "waiting for network-online.target" || got[0].GetRevision() != 7 {
		t.Fatalf("re-sent %v, want m1 with the new reason at its revision", got)
	}
	be.set("m1", nil)
	be.set("m2", nil)
	got = s.bootChanges(tr, now)
	if len(got) != 1 || got[0].GetMachine().GetId() != "m1" || got[0].GetBootPhase() != "" {
		t.Fatalf("re-sent %v, want m1 booted (no phase)", got)
	}
	if got := s.bootChanges(tr, now); len(got) != 0 {
		t.Fatalf("re-sent %d with nothing new", len(got))
	}
}
