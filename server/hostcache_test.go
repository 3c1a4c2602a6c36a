package server

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// countingHosts is a HostsFunc that counts its calls and the most that
// ran at once; with a gate it blocks each call until the gate yields.
type countingHosts struct {
	calls, running, most atomic.Int32
	gate                 chan struct{} // nil: answer at once
	vcpus                atomic.Int32  // host_vcpus of the one host it reports
}

func (h *countingHosts) read(ctx context.Context) []backend.HostStatus {
	h.calls.Add(1)
	n := h.running.Add(1)
	defer h.running.Add(-1)
	for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
	}
	if h.gate != nil {
		select {
		case <-h.gate:
		case <-ctx.Done():
		}
	}
	return []backend.HostStatus{{Name: "kvm-a1", Zone: "zone-a", Connected: true,
		Capacity: backend.HostCapacity{VCPUs: int(h.vcpus.Load())}}}
}

// waitRead polls until c has finished a read.
func waitRead(t *testing.T, c *HostCache) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, ok := c.Snapshot(); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the host cache was never read")
		}
	}
}

// waitCalls polls until hosts has been called n times.
func waitCalls(t *testing.T, h *countingHosts, n int32) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); h.calls.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("hosts called %d times, want %d", h.calls.Load(), n)
		}
	}
}

var a1 = map[string]string{"zone": "zone-a", "host": "kvm-a1"}

// TestHostGaugesScrapeNeverReadsHosts: scrapes serve the cached snapshot
// and never call the hosts; before the first read the gauges are absent.
func TestHostGaugesScrapeNeverReadsHosts(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	h := &countingHosts{}
	h.vcpus.Store(8)
	c := m.RegisterHostCapacity(h.read)
	t.Cleanup(c.Close)
	for range 3 {
		if _, ok := seriesValue(t, m, "host_vcpus", a1); ok {
			t.Fatal("host_vcpus before the first read; want absent")
		}
	}
	c.Refresh()
	waitRead(t, c)
	h.vcpus.Store(16) // the hosts change; the scrape must not notice
	for range 3 {
		if v, ok := seriesValue(t, m, "host_vcpus", a1); !ok || v != 8 {
			t.Fatalf("host_vcpus = %v (found %v), want the snapshot's 8", v, ok)
		}
	}
	if n := h.calls.Load(); n != 1 {
		t.Errorf("hosts called %d times by one refresh and 6 scrapes, want 1", n)
	}
}

// TestHostGaugesRefreshAfterPass: the end of a reconcile pass has the
// snapshot read again.
func TestHostGaugesRefreshAfterPass(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	h := &countingHosts{}
	h.vcpus.Store(4)
	c := m.RegisterHostCapacity(h.read)
	t.Cleanup(c.Close)
	m.DomainsNotRunning(map[string]map[string]int{"zone-a": {}})
	waitCalls(t, h, 1)
	waitRead(t, c)
	if v, ok := seriesValue(t, m, "host_vcpus", a1); !ok || v != 4 {
		t.Fatalf("host_vcpus = %v (found %v) after a pass, want 4", v, ok)
	}
	h.vcpus.Store(6)
	m.DomainsNotRunning(map[string]map[string]int{"zone-a": {}})
	waitCalls(t, h, 2)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if v, _ := seriesValue(t, m, "host_vcpus", a1); v == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second pass's read never reached the gauge")
		}
	}
}

// TestHostGaugesSlowHosts: a read that hangs blocks neither the pass that
// asked for it nor a scrape; passes meanwhile ask for one more read, never
// a second at once; Close cuts the hung read.
func TestHostGaugesSlowHosts(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	h := &countingHosts{gate: make(chan struct{})}
	c := m.RegisterHostCapacity(h.read)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 5 {
			m.DomainsNotRunning(map[string]map[string]int{"zone-a": {}})
		}
		if _, ok := seriesValue(t, m, "host_vcpus", a1); ok {
			t.Error("host_vcpus while the first read hangs; want absent")
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a pass or a scrape waited for a hung read of the hosts")
	}
	waitCalls(t, h, 1)
	h.gate <- struct{}{} // the first read answers; the passes during it asked for one more
	waitCalls(t, h, 2)
	if n := h.most.Load(); n != 1 {
		t.Errorf("%d reads ran at once, want 1", n)
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not cut the hung read")
	}
	if n := h.calls.Load(); n != 2 {
		t.Errorf("hosts called %d times, want 2 (5 passes during one read coalesce)", n)
	}
	c.Refresh() // after Close: nothing
	if n := h.calls.Load(); n != 2 {
		t.Errorf("Refresh after Close read the hosts")
	}
}
