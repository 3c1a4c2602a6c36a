package lifecycle

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// confirmingBackend is a testBackend that can also confirm a VM is gone
// (backend.Confirmer), with a scripted answer.
type confirmingBackend struct {
	*testBackend
	mu    sync.Mutex
	gone  bool
	err   error
	asked []backend.Placement
}

func (c *confirmingBackend) ConfirmGone(_ context.Context, id string, pl backend.Placement) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, pl)
	return c.gone, c.err
}

func (c *confirmingBackend) answer(gone bool, err error) {
	c.mu.Lock()
	c.gone, c.err = gone, err
	c.mu.Unlock()
}

// TestVanishedOnlyWhenConfirmed: a machine missing from a complete listing
// is declared vanished only when the backend's direct lookup confirms its
// VM is gone; a lookup that finds it, or fails, keeps the machine.
func TestVanishedOnlyWhenConfirmed(t *testing.T) {
	t.Parallel()
	now := time.Now()
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	cb := &confirmingBackend{testBackend: f.be}
	f.wrap = cb
	f.start(2, func(c *Config) { c.Now = func() time.Time { return now } })
	f.toIdle("m000")
	f.toConfigured("m001", "c1")
	now = now.Add(time.Second)
	f.be.mu.Lock()
	delete(f.be.vms, "m000")
	delete(f.be.vms, "m001")
	f.be.mu.Unlock()
	ctx := t.Context()

	for _, tc := range []struct {
		name string
		gone bool
		err  error
	}{
		{"found by lookup", false, nil},
		{"lookup failed", true, errors.New("confirm gone: look up bf-m000: rpc failure")},
	} {
		cb.answer(tc.gone, tc.err)
		rep := f.e.Reconcile(ctx)
		m0, _ := f.e.Get(ctx, "m000")
		m1, _ := f.e.Get(ctx, "m001")
		if rep.Vanished != 0 || m0.State != record.Idle || m1.State != record.Configured {
			t.Fatalf("%s: report %+v, m000 %s, m001 %s", tc.name, rep, m0.State, m1.State)
		}
	}
	cb.mu.Lock()
	asked := append([]backend.Placement(nil), cb.asked...)
	cb.mu.Unlock()
	if len(asked) != 4 || asked[0].Domain == "" || asked[0].Zone == "" {
		t.Fatalf("lookups asked %+v, want both machines each pass, with their placement", asked)
	}

	cb.answer(true, nil)
	rep := f.e.Reconcile(ctx)
	m0, _ := f.e.Get(ctx, "m000")
	m1, _ := f.e.Get(ctx, "m001")
	if rep.Vanished != 2 || m0.State != record.Failed || m1.State != record.Failed || !strings.Contains(m0.LastError, "vanished") {
		t.Fatalf("confirmed gone: report %+v, m000 %s %q, m001 %s", rep, m0.State, m0.LastError, m1.State)
	}
}
