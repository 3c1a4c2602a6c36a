package lifecycle

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// askingBackend asks for reconcile passes (backend.ReconcileRequester) and
// counts the listings.
type askingBackend struct {
	*testBackend
	ask   chan struct{}
	lists atomic.Int32
}

func (b *askingBackend) ReconcileRequests() <-chan struct{} { return b.ask }

func (b *askingBackend) Inventory(ctx context.Context) []backend.ZoneInventory {
	b.lists.Add(1)
	return b.testBackend.Inventory(ctx)
}

// A backend's request (a call abandoned at its bound that succeeded late)
// runs a pass soon, with periodic reconcile off.
func TestBackendRequestRunsAPass(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	ab := &askingBackend{testBackend: f.be, ask: make(chan struct{}, 1)}
	f.wrap = ab
	f.start(1, func(c *Config) { c.ReconcileInterval = 0 })
	before := ab.lists.Load()
	ab.ask <- struct{}{}
	deadline := time.Now().Add(5 * time.Second)
	for ab.lists.Load() == before {
		if time.Now().After(deadline) {
			t.Fatalf("no pass within 5 s of the backend's request (%d listings)", before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
