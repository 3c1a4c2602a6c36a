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

// A call that does not return within --libvirt-call-timeout fails as
// transient, naming the host and the call, and frees its caller; the
// abandoned call finishes later without harm.
func TestCallPastBoundIsTransient(t *testing.T) {
	t.Parallel()
	b, f, logs := newFaultBackend(t, func(c *Config) { c.CallTimeout = 200 * time.Millisecond }, nil)
	mustCreate(t, b, "m1")
	stuck := f.add(&fault{op: "dom.IsActive", kind: faultBlock})
	start := time.Now()
	err := b.Start(context.Background(), "m1", backend.Placement{Zone: "z1"})
	took := time.Since(start)
	if err == nil || !errors.Is(err, backend.ErrTransient) {
		t.Fatalf("Start on a stuck host: %v, want a transient error", err)
	}
	for _, want := range []string{`zone "z1"`, "IsActive", "did not return within 200ms", "--libvirt-call-timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if took > 2*time.Second {
		t.Errorf("Start returned after %s; the bound is 200ms", took)
	}
	if !strings.Contains(logs.String(), "abandoned") {
		t.Errorf("no WARN for the abandoned call:\n%s", logs)
	}
	close(stuck.release)
	f.clear()
	waitFor(t, 5*time.Second, func() bool { return b.loc.hosts["z1"].Inflight() == 0 })
	if err := b.Start(context.Background(), "m1", backend.Placement{Zone: "z1"}); err != nil {
		t.Fatalf("Start after the host answered again: %v", err)
	}
}

// A host that never answers holds at most hostconn.MaxCallsPerHost calls (threads)
// inside libvirt; further calls fail at their bound without starting.
func TestStuckHostHoldsBoundedCalls(t *testing.T) {
	t.Parallel()
	b, f, _ := newFaultBackend(t, func(c *Config) { c.CallTimeout = 300 * time.Millisecond }, nil)
	stuck := f.add(&fault{op: "conn.GetCapabilities", kind: faultBlock})
	h := b.loc.hosts["z1"]
	var wg sync.WaitGroup
	errs := make(chan error, 2*hostconn.MaxCallsPerHost)
	for range 2 * hostconn.MaxCallsPerHost {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- h.With(func(c virt.Conn) error { _, err := c.GetCapabilities(); return err })
		}()
	}
	wg.Wait()
	close(errs)
	busy := 0
	for err := range errs {
		var ct *hostconn.CallTimeoutError
		if !errors.As(err, &ct) {
			t.Fatalf("call on a stuck host: %v, want a call timeout", err)
		}
		if ct.Busy {
			busy++
		}
	}
	if got := f.hits(stuck); got > hostconn.MaxCallsPerHost {
		t.Errorf("%d calls entered libvirt, want at most %d", got, hostconn.MaxCallsPerHost)
	}
	if busy < hostconn.MaxCallsPerHost {
		t.Errorf("%d calls refused for want of a slot, want at least %d", busy, hostconn.MaxCallsPerHost)
	}
	close(stuck.release)
	waitFor(t, 5*time.Second, func() bool { return h.Inflight() == 0 })
}

// A host whose connect hangs (a rack without power: SYNs dropped) does not
// hold up New; its zone says "connecting" until the call bound, then down
// with the cause.
func TestStartDoesNotWaitForSilentHost(t *testing.T) {
	t.Parallel()
	f := newFaults(t)
	thaw := f.freezeDials()
	defer thaw()
	cfg := testConfig(t)
	cfg.CallTimeout = 500 * time.Millisecond
	start := time.Now()
	b, err := newBackend(cfg, f.dial)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Errorf("New took %s with a silent host", took)
	}
	if err := b.ZoneReady("z1"); !errors.Is(err, backend.ErrHostConnecting) {
		t.Fatalf("ZoneReady while connecting: %v, want ErrHostConnecting", err)
	}
	waitFor(t, 5*time.Second, func() bool { return !errors.Is(b.ZoneReady("z1"), backend.ErrHostConnecting) })
	err = b.ZoneReady("z1")
	if !errors.Is(err, backend.ErrHostUnavailable) || !strings.Contains(err.Error(), "connect did not finish within 500ms") {
		t.Fatalf("ZoneReady after the bound: %v", err)
	}
}

// Close takes one host's bound, not the sum over hosts.
func TestCloseIsParallel(t *testing.T) {
	t.Parallel()
	f := newFaults(t)
	thaw := f.freezeDials()
	defer thaw()
	cfg := testConfig(t)
	for i := range 20 {
		cfg.Hosts = append(cfg.Hosts, Host{Zone: "z" + string(rune('a'+i)), URI: nodeURI(t)})
	}
	b, err := newBackend(cfg, f.dial)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = b.Close()
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Close of 21 hosts stuck in their dial took %s", took)
	}
}

// A zone whose host does not answer its listing does not delay another
// zone's: InventoryEach hands each zone over when its own hosts are done.
func TestInventoryEachStreamsZones(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, func(c *Config) {
		c.Hosts = append(c.Hosts, Host{Zone: "slow", URI: nodeURI(t)})
		c.InventoryTimeout = 2 * time.Second
	})
	b.loc.hosts["slow"].listing.Lock() // an earlier listing of slow still inside libvirt
	defer b.loc.hosts["slow"].listing.Unlock()
	start := time.Now()
	var order []string
	b.InventoryEach(context.Background(), 1, func(zi backend.ZoneInventory) {
		order = append(order, zi.Zone)
		if zi.Zone == "slow" && (zi.Err == nil || !strings.Contains(zi.Err.Error(), "previous listing is still waiting")) {
			t.Errorf("slow zone: %v, want the earlier listing named", zi.Err)
		}
		if zi.Zone == "z1" && zi.Err != nil {
			t.Errorf("z1: %v", zi.Err)
		}
	})
	if len(order) != 2 {
		t.Fatalf("zones handed over: %v", order)
	}
	if time.Since(start) > time.Second {
		t.Errorf("a host with a listing in flight delayed the pass: %s", time.Since(start))
	}
}
