package lifecycle

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// stubbornBackend's Create ignores its context and returns only when the
// test says so, like a libvirt call stuck in the daemon. It records any
// moment two backend methods ran on one machine at once.
type stubbornBackend struct {
	*testBackend
	createGate chan struct{}
	mu         sync.Mutex
	active     map[string]int
	overlaps   []string
	deletes    int
}

func (b *stubbornBackend) enter(id, what string) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.active[id]++
	if b.active[id] > 1 {
		b.overlaps = append(b.overlaps, what+" on "+id)
	}
	return func() { b.mu.Lock(); b.active[id]--; b.mu.Unlock() }
}

func (b *stubbornBackend) Create(ctx context.Context, s backend.MachineSpec) (backend.Placement, error) {
	defer b.enter(s.MachineID, "create")()
	<-b.createGate // deliberately deaf to ctx
	return b.testBackend.Create(context.Background(), s)
}

func (b *stubbornBackend) Delete(ctx context.Context, s backend.DeleteSpec) error {
	defer b.enter(s.MachineID, "delete")()
	b.mu.Lock()
	b.deletes++
	b.mu.Unlock()
	return b.testBackend.Delete(ctx, s)
}

func newStubborn() *stubbornBackend {
	return &stubbornBackend{testBackend: newTestBackend(), createGate: make(chan struct{}), active: map[string]int{}}
}

// Rule 2 (issue 10, path 3): after a Create timed out while its backend
// call is still running, a Release is accepted at once (DELETING), but its
// Delete waits for the Create call to return: never two backend methods on
// one machine at once.
func TestNoBackendOverlapAfterTimeout(t *testing.T) {
	t.Parallel()
	be := newStubborn()
	e, err := New(Config{Provider: "test", Seed: seed(1), CreateTimeout: 30 * time.Millisecond}, newMemStore(), be)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.Reconcile(t.Context()) // the first listing, which mutations wait for
	e.Create(t.Context(), record.CreateRequest{MachineID: "m000"})
	f := &fixture{t: t, e: e}
	m := f.waitState("m000", record.Failed)
	if !strings.Contains(m.LastError, "timed out") {
		t.Fatalf("last_error %q", m.LastError)
	}
	ack, err := e.Release(t.Context(), "m000")
	if err != nil || ack.Machine.State != record.Deleting {
		t.Fatalf("release: %v %s", err, ack.Machine.State)
	}
	time.Sleep(50 * time.Millisecond)
	be.mu.Lock()
	early := be.deletes
	be.mu.Unlock()
	if early != 0 {
		t.Fatal("Delete started while the timed-out Create was still inside the backend")
	}
	close(be.createGate)
	f.waitState("m000", record.Speculative)
	be.mu.Lock()
	defer be.mu.Unlock()
	if len(be.overlaps) > 0 || be.deletes != 1 {
		t.Fatalf("overlaps %v, deletes %d", be.overlaps, be.deletes)
	}
}

// Rule 2: a transition whose backend call cannot start before its own
// deadline, because an earlier call on the machine never returns, times out
// saying what it waited for.
func TestWaitForPreviousCallTimesOut(t *testing.T) {
	t.Parallel()
	be := newStubborn()
	defer close(be.createGate)
	e, err := New(Config{Provider: "test", Seed: seed(1), CreateTimeout: 20 * time.Millisecond,
		DeleteTimeout: 40 * time.Millisecond}, newMemStore(), be)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	f := &fixture{t: t, e: e}
	e.Reconcile(t.Context()) // the first listing, which mutations wait for
	e.Create(t.Context(), record.CreateRequest{MachineID: "m000"})
	f.waitState("m000", record.Failed)
	if _, err := e.Release(t.Context(), "m000"); err != nil {
		t.Fatal(err)
	}
	m := f.waitState("m000", record.Failed)
	if !strings.Contains(m.LastError, "release timed out") || !strings.Contains(m.LastError, "create call") {
		t.Fatalf("last_error %q", m.LastError)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if be.deletes != 0 {
		t.Fatal("Delete ran alongside the stuck Create")
	}
}
