package libvirt

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// fillSlots runs n calls of NumOfDomains on h at once (blocked by a
// fault, so each is abandoned at its bound) and returns how many of them
// were refused as busy.
func fillSlots(t *testing.T, h *host, n int) (busy int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- h.With(func(c virt.Conn) error { _, err := c.NumOfDomains(); return err })
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		var ct *hostconn.CallTimeoutError
		if !errors.As(err, &ct) {
			t.Fatalf("call on a stuck host: %v, want a call timeout", err)
		}
		if ct.Busy {
			busy++
		}
	}
	return busy
}

// reconnect kills the host's current connection and waits for the next.
func reconnect(t *testing.T, b *Backend, f *faults) {
	t.Helper()
	f.mu.Lock()
	c, dials := f.conns[len(f.conns)-1], f.dials
	f.mu.Unlock()
	c.kill()
	waitFor(t, 5*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.dials > dials && b.ZoneReady("z1") == nil
	})
}

// Call slots belong to a connection: calls abandoned on a dead link keep
// that link's slots, and the reconnected host takes new calls at once
// (issue 31, case 4). Across reconnects the host's threads stay bounded by
// MaxThreadsPerHost, and every one is counted until libvirt returns it.
func TestReconnectGetsFreshCallSlots(t *testing.T) {
	t.Parallel()
	b, f, logs := newFaultBackend(t, func(c *Config) { c.CallTimeout = 300 * time.Millisecond }, nil)
	h := b.loc.hosts["z1"]
	stuck := f.add(&fault{op: "conn.NumOfDomains", kind: faultBlock})
	if busy := fillSlots(t, h, hostconn.MaxCallsPerHost); busy != 0 {
		t.Fatalf("%d of %d calls refused on a fresh connection", busy, hostconn.MaxCallsPerHost)
	}
	if busy := fillSlots(t, h, 1); busy != 1 {
		t.Fatalf("a call past the connection's %d slots was not refused", hostconn.MaxCallsPerHost)
	}
	reconnect(t, b, f)
	if err := h.With(func(c virt.Conn) error { _, err := c.GetCapabilities(); return err }); err != nil {
		t.Fatalf("first call after a reconnect, with %d calls stuck on the old connection: %v", hostconn.MaxCallsPerHost, err)
	}
	if !strings.Contains(logs.String(), `"calls_inside":64`) {
		t.Errorf("the loss of a connection with calls inside does not say how many:\n%s", logs)
	}
	// Each reconnect strands at most a connection's slots; the host's
	// cap holds the sum.
	for i := range hostconn.MaxThreadsPerHost/hostconn.MaxCallsPerHost - 1 {
		if i > 0 {
			reconnect(t, b, f)
		}
		if busy := fillSlots(t, h, hostconn.MaxCallsPerHost); busy != 0 {
			t.Fatalf("%d calls refused on a fresh connection under the host's cap", busy)
		}
	}
	if got := h.Inflight(); got != hostconn.MaxThreadsPerHost || h.Abandoned() != hostconn.MaxThreadsPerHost {
		t.Fatalf("inflight %d, abandoned %d; want both %d", got, h.Abandoned(), hostconn.MaxThreadsPerHost)
	}
	if got := f.hits(stuck); got > hostconn.MaxThreadsPerHost {
		t.Errorf("%d calls entered libvirt, want at most %d", got, hostconn.MaxThreadsPerHost)
	}
	close(stuck.release)
	waitFor(t, 5*time.Second, func() bool { return h.Inflight() == 0 && h.Abandoned() == 0 })
}

// The watchdog's ping is a bounded call like any other: one at most in
// flight per connection, counted among the host's threads, so a daemon
// that accepts connections but never answers them does not pile up
// pinging goroutines (issue 31, case 4).
func TestWatchdogPingIsBounded(t *testing.T) {
	t.Parallel()
	b, f, _ := newFaultBackend(t, func(c *Config) { c.KeepAliveSecs, c.KeepAliveCount = 1, 1 }, nil)
	h := b.loc.hosts["z1"]
	silent := f.add(&fault{op: "conn.GetLibVersion", kind: faultBlock})
	f.mu.Lock()
	dials := f.dials
	f.mu.Unlock()
	// Each silent ping ends its connection; the host re-dials and pings
	// the new one.
	waitFor(t, 10*time.Second, func() bool { return f.hits(silent) >= 3 })
	f.mu.Lock()
	conns := f.dials - dials + 1
	f.mu.Unlock()
	pings := f.hits(silent)
	if pings > conns {
		t.Errorf("%d pings inside libvirt over %d connections: more than one per connection", pings, conns)
	}
	if got := h.Inflight(); got < pings {
		t.Errorf("%d pings stuck inside libvirt, the host counts %d threads", pings, got)
	}
	f.clear()
	close(silent.release)
	waitFor(t, 5*time.Second, func() bool { return h.Inflight() == 0 && b.ZoneReady("z1") == nil })
}

// A call that changes the host, abandoned at its bound, that succeeds
// later is neither trusted nor lost: a WARN names it and the host, and
// the engine is asked for a reconcile pass (issue 31, case 4).
func TestLateSuccessAsksForReconcile(t *testing.T) {
	t.Parallel()
	b, f, logs := newFaultBackend(t, func(c *Config) { c.CallTimeout = 200 * time.Millisecond }, nil)
	pl := mustCreate(t, b, "m1")
	if err := b.loc.hosts["z1"].WithDomain(pl.Domain, func(_ virt.Conn, d virt.Domain) error { return d.Destroy() }); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	slow := f.add(&fault{op: "dom.Create", kind: faultBlock})
	err := b.Start(context.Background(), "m1", backend.Placement{Zone: "z1"})
	var ct *hostconn.CallTimeoutError
	if !errors.As(err, &ct) {
		t.Fatalf("Start on a slow host: %v, want a call timeout", err)
	}
	select {
	case <-b.ReconcileRequests():
		t.Fatal("a reconcile was asked for before the abandoned call returned")
	default:
	}
	close(slow.release)
	select {
	case <-b.ReconcileRequests():
	case <-time.After(5 * time.Second):
		t.Fatal("the abandoned Create succeeded later and no reconcile was asked for")
	}
	if l := logs.String(); !strings.Contains(l, "returned after it was abandoned") || !strings.Contains(l, `"call":"Create `) {
		t.Errorf("no WARN naming the late call:\n%s", l)
	}
}
