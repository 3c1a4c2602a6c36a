package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/reconcile"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// gate blocks its callers until opened.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate   { return &gate{ch: make(chan struct{})} }
func (g *gate) open()  { g.once.Do(func() { close(g.ch) }) }
func (g *gate) block() { <-g.ch }

// zoneOf is the seed's zone of machine id ("m000" zone-a, "m001" zone-b…).
func zoneOf(id string) string {
	var n int
	fmt.Sscanf(id, "m%d", &n)
	return []string{"zone-a", "zone-b"}[n%2]
}

// newStreamEngine is an engine over be (a streaming fake) that is not
// started: the test drives Start or Reconcile.
func newStreamEngine(t *testing.T, be backend.Backend, n int) *Engine {
	t.Helper()
	e, err := New(Config{Provider: "test", Seed: seed(n)}, newMemStore(), be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// TestStreamingListsZonesIndependently: while one zone's listing hangs,
// the other zone is listed and its mutations are accepted at once; the
// hanging zone's are refused (its marks are not known yet) until its
// listing arrives.
func TestStreamingListsZonesIndependently(t *testing.T) {
	t.Parallel()
	hold := newGate()
	be := fake.New(fake.Options{Fail: func(op, id string) error {
		if op == fake.OpInventory && id == "zone-a" {
			hold.block()
		}
		return nil
	}})
	e := newStreamEngine(t, be, 4)
	t.Cleanup(hold.open) // before Close: the hook ignores ctx
	e.Start(context.Background())
	waitFor(t, "zone-b listed", func() bool { return e.ZoneListed("zone-b") })
	if e.ZoneListed("zone-a") {
		t.Fatal("zone-a listed while its listing hangs")
	}
	start := time.Now()
	if _, err := e.Create(context.Background(), record.CreateRequest{MachineID: "m001"}); err != nil {
		t.Fatalf("create in the listed zone: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("create in the listed zone took %s", took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := e.Create(ctx, record.CreateRequest{MachineID: "m000"}); codeOf(err) != record.CodeUnavailable {
		t.Fatalf("create in the unlisted zone: %v, want Unavailable", err)
	}
	hold.open()
	waitFor(t, "zone-a listed", func() bool { return e.ZoneListed("zone-a") })
	if _, err := e.Create(context.Background(), record.CreateRequest{MachineID: "m000"}); err != nil {
		t.Fatalf("create after the listing: %v", err)
	}
}

// startRig is a started engine over a fake whose Start calls on zone-a
// machines go through hook first.
func startRig(t *testing.T, n int, hook func(id string) error) (*Engine, *fake.Backend) {
	t.Helper()
	be := fake.New(fake.Options{Fail: func(op, id string) error {
		if op == fake.OpStart && zoneOf(id) == "zone-a" {
			return hook(id)
		}
		return nil
	}})
	e := newStreamEngine(t, be, n)
	startListed(e, context.Background())
	for i := range n {
		id := fmt.Sprintf("m%03d", i)
		if _, err := e.Create(context.Background(), record.CreateRequest{MachineID: id}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		id := fmt.Sprintf("m%03d", i)
		waitFor(t, id+" IDLE", func() bool { m, _ := e.Get(context.Background(), id); return m.State == record.Idle })
		be.SetRunState(id, crashed)
	}
	return e, be
}

// TestSlowHostRestartsDoNotDelayAnother: restarts on a host that hangs
// take at most reconcile.PerHostCalls slots there, and another host's restart is
// done meanwhile.
func TestSlowHostRestartsDoNotDelayAnother(t *testing.T) {
	t.Parallel()
	hold := newGate()
	var inflight, peak atomic.Int32
	e, be := startRig(t, 8, func(string) error {
		n := inflight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		hold.block()
		inflight.Add(-1)
		return nil
	})
	t.Cleanup(hold.open)
	done := make(chan ReconcileReport, 1)
	go func() { done <- e.Reconcile(context.Background()) }()
	waitFor(t, "zone-b's domains started", func() bool {
		for _, id := range []string{"m001", "m003", "m005", "m007"} {
			if vm, _ := be.VM(id); !vm.Running {
				return false
			}
		}
		return true
	})
	time.Sleep(20 * time.Millisecond) // room for a third call on the slow host, were it allowed
	if p := peak.Load(); p != reconcile.PerHostCalls {
		t.Fatalf("%d calls at once on the slow host, want %d", p, reconcile.PerHostCalls)
	}
	hold.open()
	if rep := <-done; rep.Restarted != 8 || rep.NotRunning != 0 {
		t.Fatalf("report %+v", rep)
	}
}

// TestSickHostGetsNoMoreCalls: once a host fails a call as unreachable,
// the pass makes no more calls there (its machines wait for the next
// pass, counted as not running); other hosts are unaffected.
func TestSickHostGetsNoMoreCalls(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	e, be := startRig(t, 8, func(string) error {
		calls.Add(1)
		return fmt.Errorf("connection reset: %w", backend.ErrHostUnavailable)
	})
	rep := e.Reconcile(context.Background())
	if n := calls.Load(); n < 1 || n > reconcile.PerHostCalls {
		t.Fatalf("%d Start calls on the unreachable host", n)
	}
	if rep.Restarted != 4 || rep.NotRunning != 4 {
		t.Fatalf("report %+v", rep)
	}
	if vm, _ := be.VM("m001"); !vm.Running {
		t.Fatal("the healthy host's domain was not started")
	}
}

// slowConfirm is a fake whose ConfirmGone of one machine hangs.
type slowConfirm struct {
	*fake.Backend
	id   string
	hold *gate
}

func (s *slowConfirm) ConfirmGone(ctx context.Context, id string, pl backend.Placement) (bool, error) {
	if id == s.id {
		s.hold.block()
	}
	return s.Backend.ConfirmGone(ctx, id, pl)
}

// TestSlowConfirmDoesNotDelayAnother: a ConfirmGone that hangs on one
// host holds neither the zones' listing nor another host's restart; once
// it answers, the machine vanishes as before.
func TestSlowConfirmDoesNotDelayAnother(t *testing.T) {
	t.Parallel()
	be := &slowConfirm{Backend: fake.New(fake.Options{}), id: "m000", hold: newGate()}
	e := newStreamEngine(t, be, 2)
	t.Cleanup(be.hold.open)
	startListed(e, context.Background())
	for _, id := range []string{"m000", "m001"} {
		if _, err := e.Create(context.Background(), record.CreateRequest{MachineID: id}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, id+" IDLE", func() bool { m, _ := e.Get(context.Background(), id); return m.State == record.Idle })
	}
	be.Vanish("m000")
	be.SetRunState("m001", crashed)
	done := make(chan ReconcileReport, 1)
	go func() { done <- e.Reconcile(context.Background()) }()
	waitFor(t, "m001 started", func() bool { vm, _ := be.VM("m001"); return vm.Running })
	if m, _ := e.Get(context.Background(), "m000"); m.State != record.Idle {
		t.Fatalf("m000 %s before ConfirmGone answered", m.State)
	}
	be.hold.open()
	if rep := <-done; rep.Vanished != 1 || rep.Restarted != 1 {
		t.Fatalf("report %+v", rep)
	}
	if m, _ := e.Get(context.Background(), "m000"); m.State != record.Failed {
		t.Fatalf("m000 %s after ConfirmGone said gone", m.State)
	}
}
