package lifecycle

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// blockingInventory's Inventory blocks until its context ends, and says
// when that happened: it shows whether reconcile is cancelled at once.
type blockingInventory struct {
	*testBackend
	calls     atomic.Int32
	blockOnce sync.Once
	blocked   chan struct{} // closed when a reconcile is blocked in Inventory
	once      sync.Once
	cancelled chan struct{}
}

func (b *blockingInventory) Inventory(ctx context.Context) []backend.ZoneInventory {
	if b.calls.Add(1) == 1 {
		return b.testBackend.Inventory(ctx) // the first listing, which mutations wait for
	}
	b.blockOnce.Do(func() { close(b.blocked) })
	<-ctx.Done()
	b.once.Do(func() { close(b.cancelled) })
	return nil
}

func newShutdownFixture(t *testing.T, grace time.Duration) (*fixture, *blockingInventory) {
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	bi := &blockingInventory{testBackend: f.be, cancelled: make(chan struct{}), blocked: make(chan struct{})}
	f.wrap = bi
	f.start(2, func(c *Config) { c.ShutdownGrace, c.ReconcileInterval = grace, 5*time.Millisecond })
	f.toIdle("m000")
	f.be.setDelay(record.OpConfigure, 300*time.Millisecond)
	if _, err := f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: "c"}); err != nil {
		t.Fatal(err)
	}
	<-bi.blocked // a periodic reconcile is under way when the test stops the engine
	return f, bi
}

// Rule 3 (issue 10, path 4): Close lets an in-flight Configure finish
// within the grace; meanwhile mutations get Unavailable, reads work, and
// reconcile is stopped at once.
func TestCloseLetsTransitionsFinish(t *testing.T) {
	t.Parallel()
	f, bi := newShutdownFixture(t, 5*time.Second)
	closed := make(chan struct{})
	go func() { f.e.Close(); close(closed) }()
	select {
	case <-bi.cancelled:
	case <-time.After(200 * time.Millisecond):
		t.Fatal("reconcile was not cancelled at the start of the shutdown")
	}
	_, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m001"})
	if codeOf(err) != record.CodeUnavailable || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("mutation during shutdown: %v", err)
	}
	if m, err := f.e.Get(t.Context(), "m000"); err != nil || m.State != record.Configuring {
		t.Fatalf("read during shutdown: %v %s", err, m.State)
	}
	<-closed
	if s := f.st.stored("m000"); s.State != record.Configured {
		t.Fatalf("after a graceful Close the machine is %s (%q)", s.State, s.LastError)
	}
	if s := f.st.stored("m001"); s.State != record.Speculative {
		t.Fatalf("refused mutation changed m001: %s", s.State)
	}
}

// Rule 3: past the bound, what still runs is cancelled and stays
// transitional in the store, for the next Start to resume.
func TestShutdownBoundCancels(t *testing.T) {
	t.Parallel()
	f, _ := newShutdownFixture(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	f.e.Shutdown(ctx)
	if d := time.Since(start); d > 250*time.Millisecond {
		t.Fatalf("Shutdown took %s with a 50ms bound", d)
	}
	if s := f.st.stored("m000"); s.State != record.Configuring {
		t.Fatalf("cut-off transition stored as %s", s.State)
	}
	f.e.Close() // a second stop is a no-op
	// The next start resumes it; a Configure cannot be re-driven (the blob
	// is never stored), so it ends FAILED saying why, never stuck.
	f.start(2)
	if m := f.waitState("m000", record.Failed); !strings.Contains(m.LastError, "restart") {
		t.Fatalf("resumed Configure: %q", m.LastError)
	}
}

// gatedStore blocks the next Commit until released.
type gatedStore struct {
	*memStore
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (s *gatedStore) Commit(ctx context.Context, b record.Batch) error {
	if s.armed.Swap(false) {
		close(s.entered)
		<-s.gate
	}
	return s.memStore.Commit(ctx, b)
}

// Rule 3: a mutation being accepted when the stop begins (its commit in
// the store) is waited for, and so is the transition it starts: a quick
// exit promises nothing acknowledged was cut short.
func TestShutdownWaitsForAcceptanceInProgress(t *testing.T) {
	t.Parallel()
	st := &gatedStore{memStore: newMemStore(), entered: make(chan struct{}), gate: make(chan struct{})}
	e, err := New(Config{Provider: "test", Seed: seed(1), ShutdownGrace: 5 * time.Second}, st, newTestBackend())
	if err != nil {
		t.Fatal(err)
	}
	startListed(e, t.Context())
	st.armed.Store(true)
	acked := make(chan error, 1)
	go func() {
		_, err := e.Create(context.Background(), record.CreateRequest{MachineID: "m000"})
		acked <- err
	}()
	<-st.entered
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a mutation was being accepted")
	case <-time.After(50 * time.Millisecond):
	}
	close(st.gate)
	if err := <-acked; err != nil {
		t.Fatalf("the mutation that began before the stop: %v", err)
	}
	<-closed
	if s := st.stored("m000"); s.State != record.Idle {
		t.Fatalf("acknowledged Create stored as %s after a graceful stop", s.State)
	}
}

// stuckConfigure's Configure ignores its context until released, as a
// libvirt call to a frozen daemon does.
type stuckConfigure struct {
	*testBackend
	release chan struct{}
}

func (b *stuckConfigure) Configure(ctx context.Context, s backend.ConfigureSpec) error {
	<-b.release
	return nil
}

// Issue 15 case 1 (a SIGTERM while libvirtd is frozen did not exit for
// 61 s): a backend call that ignores cancellation does not hold the stop
// past the bound and the straggler wait; the transition stays in the store
// for the next Start.
func TestShutdownDoesNotWaitForStuckBackend(t *testing.T) {
	old := stragglerWait
	stragglerWait = 100 * time.Millisecond
	t.Cleanup(func() { stragglerWait = old })
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	stuck := &stuckConfigure{testBackend: f.be, release: make(chan struct{})}
	t.Cleanup(func() { close(stuck.release) })
	f.wrap = stuck
	f.start(2)
	f.toIdle("m000")
	if _, err := f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: "c"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	f.e.Shutdown(ctx)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Shutdown took %s with a 50ms bound and a 100ms straggler wait", d)
	}
	if s := f.st.stored("m000"); s.State != record.Configuring {
		t.Fatalf("the stuck transition is stored as %s, want CONFIGURING (resumed at next start)", s.State)
	}
}
