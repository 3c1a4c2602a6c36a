package libvirt

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// Connections lost while many calls run on them: every call gets a result
// or an error, none runs on a connection whose last reference is closed
// (faultConn counts them and fails the test), and the host ends up
// connected. Run with -race: the reference counting is the point.
func TestReconnectUnderConcurrentCalls(t *testing.T) {
	b, f, _ := newFaultBackend(t, nil, nil)
	z := b.Zones()[0]
	h := b.loc.hosts[z]
	ctx := context.Background()
	var stop atomic.Bool
	var calls, errs atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				var err error
				switch i % 3 {
				case 0:
					_, err = b.ConfirmGone(ctx, "m-stress", backend.Placement{Zone: z})
				case 1:
					inv := b.Inventory(ctx)
					err = inv[0].Err
				case 2:
					err = h.With(func(c virt.Conn) error { _, err := c.GetCapabilities(); return err })
				}
				calls.Add(1)
				if err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	drops := 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); drops++ {
		f.mu.Lock()
		c := f.conns[len(f.conns)-1]
		f.mu.Unlock()
		c.kill()
		time.Sleep(20 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	waitFor(t, 5*time.Second, func() bool { return b.ZoneReady(z) == nil })
	f.mu.Lock()
	dials := f.dials
	f.mu.Unlock()
	t.Logf("%d drops, %d dials, %d calls, %d failed", drops, dials, calls.Load(), errs.Load())
	if dials < 5 || calls.Load() < 100 {
		t.Fatalf("the stress did not stress: %d dials, %d calls", dials, calls.Load())
	}
	if errs.Load() == 0 {
		t.Errorf("no call saw a dropped connection: the drops did not land under calls")
	}
}
