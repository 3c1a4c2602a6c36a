package lifecycle

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// zoneAReady is a streaming fake whose zone-a readiness is scripted and
// whose zone-a listing waits for hold.
type zoneAReady struct {
	*fake.Backend
	err  atomic.Pointer[error]
	hold *gate
}

func newZoneAReady(zoneErr error) *zoneAReady {
	b := &zoneAReady{hold: newGate()}
	b.Backend = fake.New(fake.Options{Fail: func(op, id string) error {
		if op == fake.OpInventory && id == "zone-a" {
			b.hold.block()
		}
		return nil
	}})
	b.err.Store(&zoneErr)
	return b
}

func (b *zoneAReady) ZoneReady(zone string) error {
	if p := b.err.Load(); zone == "zone-a" && *p != nil {
		return *p
	}
	return b.Backend.ZoneReady(zone)
}

// TestConnectingZoneIsWaitedFor: a mutation in a zone whose host is still
// on its first connection attempt waits for the zone's listing instead of
// being refused, and goes through once the host answered.
func TestConnectingZoneIsWaitedFor(t *testing.T) {
	t.Parallel()
	b := newZoneAReady(fmt.Errorf("host h1: %w", backend.ErrHostConnecting))
	e := newStreamEngine(t, b, 2)
	t.Cleanup(b.hold.open)
	e.Start(context.Background())
	waitFor(t, "zone-b listed", func() bool { return e.ZoneListed("zone-b") })
	done := make(chan error, 1)
	go func() { _, err := e.Create(context.Background(), record.CreateRequest{MachineID: "m000"}); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("Create did not wait for the connecting host: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	var none error
	b.err.Store(&none)
	b.hold.open()
	if err := <-done; err != nil {
		t.Fatalf("Create once the host answered: %v", err)
	}
}

// TestDownZoneIsRefusedAtOnce: a zone whose host is down (not merely
// connecting) is refused at once, as Unavailable.
func TestDownZoneIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	b := newZoneAReady(fmt.Errorf("host h1: %w", backend.ErrHostUnavailable))
	e := newStreamEngine(t, b, 2)
	t.Cleanup(b.hold.open)
	e.Start(context.Background())
	waitFor(t, "zone-b listed", func() bool { return e.ZoneListed("zone-b") })
	start := time.Now()
	_, err := e.Create(context.Background(), record.CreateRequest{MachineID: "m000"})
	if codeOf(err) != record.CodeUnavailable || time.Since(start) > time.Second {
		t.Fatalf("Create in a down zone: %v after %s", err, time.Since(start))
	}
}

// TestWaitReadyZonesListed: serve's wait covers the ready zones only.
func TestWaitReadyZonesListed(t *testing.T) {
	t.Parallel()
	b := newZoneAReady(fmt.Errorf("host h1: %w", backend.ErrHostConnecting))
	e := newStreamEngine(t, b, 2)
	t.Cleanup(b.hold.open)
	e.Start(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if !e.WaitReadyZonesListed(ctx) || !e.ZoneListed("zone-b") || e.ZoneListed("zone-a") {
		t.Fatalf("ready zone listed %v, connecting zone listed %v", e.ZoneListed("zone-b"), e.ZoneListed("zone-a"))
	}
}
