package lifecycle

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// memStore is a minimal Store for engine unit tests (the real ones live in
// server/store and have their own tests).
type memStore struct {
	mu       sync.Mutex
	id       uint64
	machines map[string]record.Machine
	marks    map[record.MarkKey]record.Mark
	rebuild  map[string]bool
	commits  int
	attempts int // Commit calls, failed ones included
	fail     error
}

func newMemStore() *memStore {
	return &memStore{id: 42, machines: map[string]record.Machine{}, marks: map[record.MarkKey]record.Mark{}, rebuild: map[string]bool{}}
}

func (s *memStore) Load(context.Context) (record.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := record.Snapshot{StoreID: s.id, Marks: maps.Clone(s.marks), Rebuilding: maps.Clone(s.rebuild)}
	for _, m := range s.machines {
		snap.Machines = append(snap.Machines, m.Clone())
	}
	return snap, nil
}

func (s *memStore) Commit(_ context.Context, b record.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	if s.fail != nil {
		return s.fail
	}
	s.commits++
	for _, m := range b.Machines {
		s.machines[m.ID] = m.Clone()
	}
	maps.Copy(s.marks, b.Marks)
	for _, k := range b.DropMarks {
		delete(s.marks, k)
	}
	for z, on := range b.Rebuilding {
		if on {
			s.rebuild[z] = true
		} else {
			delete(s.rebuild, z)
		}
	}
	return nil
}

func (s *memStore) Close() error { return nil }

// setFail makes every Commit fail with err (nil: succeed again).
func (s *memStore) setFail(err error) { s.mu.Lock(); s.fail = err; s.mu.Unlock() }

// stored is the machine's durable record.
func (s *memStore) stored(id string) record.Machine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.machines[id].Clone()
}

// attempted is the number of Commit calls so far.
func (s *memStore) attempted() int { s.mu.Lock(); defer s.mu.Unlock(); return s.attempts }

// testBackend is a scriptable substrate: each op can be made to fail or to
// block until released.
type testBackend struct {
	mu    sync.Mutex
	fail  map[record.OpKind]error
	gate  map[record.OpKind]chan struct{}
	vms   map[string]backend.Observed // by machine id
	blobs map[string][]byte
	calls map[record.OpKind]int
	delay map[record.OpKind]time.Duration
}

func newTestBackend() *testBackend {
	return &testBackend{fail: map[record.OpKind]error{}, gate: map[record.OpKind]chan struct{}{},
		vms: map[string]backend.Observed{}, blobs: map[string][]byte{}, calls: map[record.OpKind]int{},
		delay: map[record.OpKind]time.Duration{}}
}

func (b *testBackend) setFail(k record.OpKind, err error) {
	b.mu.Lock()
	b.fail[k] = err
	b.mu.Unlock()
}

// setDelay makes op k take d (it still honours its context).
func (b *testBackend) setDelay(k record.OpKind, d time.Duration) {
	b.mu.Lock()
	b.delay[k] = d
	b.mu.Unlock()
}

// hold makes op k block until the returned func is called.
func (b *testBackend) hold(k record.OpKind) func() {
	ch := make(chan struct{})
	b.mu.Lock()
	b.gate[k] = ch
	b.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (b *testBackend) step(ctx context.Context, k record.OpKind) error {
	b.mu.Lock()
	b.calls[k]++
	ch, err, d := b.gate[k], b.fail[k], b.delay[k]
	b.mu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func (b *testBackend) Zones() []string { return []string{"zone-a", "zone-b"} }

func (b *testBackend) Create(ctx context.Context, s backend.MachineSpec) (backend.Placement, error) {
	if err := b.step(ctx, record.OpCreate); err != nil {
		return backend.Placement{}, err
	}
	p := backend.Placement{Zone: s.Zone, Domain: "bf-" + s.MachineID}
	b.mu.Lock()
	b.vms[s.MachineID] = backend.Observed{MachineID: s.MachineID, OperationID: s.OperationID, Placement: p, Running: true}
	b.mu.Unlock()
	return p, nil
}

func (b *testBackend) Configure(ctx context.Context, s backend.ConfigureSpec) error {
	if err := b.step(ctx, record.OpConfigure); err != nil {
		return err
	}
	b.mu.Lock()
	b.blobs[s.MachineID] = append([]byte(nil), s.BootstrapBlob...)
	b.mu.Unlock()
	return nil
}

func (b *testBackend) Drain(ctx context.Context, s backend.DrainSpec) error {
	return b.step(ctx, record.OpDrain)
}

func (b *testBackend) Delete(ctx context.Context, s backend.DeleteSpec) error {
	if err := b.step(ctx, record.OpDelete); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.vms, s.MachineID)
	b.mu.Unlock()
	return nil
}

func (b *testBackend) Inventory(context.Context) []backend.ZoneInventory {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []backend.ZoneInventory{{Zone: "zone-a"}, {Zone: "zone-b"}}
	for _, o := range b.vms {
		for i := range out {
			if out[i].Zone == o.Placement.Zone {
				out[i].Machines = append(out[i].Machines, o)
			}
		}
	}
	return out
}

func (b *testBackend) Hosts(context.Context) []backend.HostStatus { return nil }
func (b *testBackend) Close() error                               { return nil }

func seed(n int) []record.Machine {
	out := make([]record.Machine, n)
	for i := range out {
		out[i] = record.Machine{ID: fmt.Sprintf("m%03d", i), Zone: []string{"zone-a", "zone-b"}[i%2],
			InstanceType: "kvm.small", CapacityType: record.CapacityOnDemand, PricePerHour: 0.01,
			VCPU: 2, MemoryMiB: 4096, Allocatable: map[string]string{"cpu": "2", "memory": "4Gi"}}
	}
	return out
}

type fixture struct {
	t  *testing.T
	e  *Engine
	st *memStore
	be *testBackend
	// wrap, if set, is the backend the engine gets (usually wrapping be).
	wrap backend.Backend
}

func newFixture(t *testing.T, n int, tweak ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	f.start(n, tweak...)
	return f
}

// start (re)opens an engine on the fixture's store, as a restart would.
func (f *fixture) start(n int, tweak ...func(*Config)) {
	f.t.Helper()
	cfg := Config{Provider: "test", Seed: seed(n)}
	for _, tw := range tweak {
		tw(&cfg)
	}
	var be backend.Backend = f.be
	if f.wrap != nil {
		be = f.wrap
	}
	e, err := New(cfg, f.st, be)
	if err != nil {
		f.t.Fatal(err)
	}
	f.e = e
	startListed(e, context.Background())
	f.t.Cleanup(e.Close)
}

// startListed starts e and waits (bounded) for its first reconcile pass,
// as serve does: mutations wait for a zone's first listing (listing.go).
func startListed(e *Engine, ctx context.Context) {
	e.Start(ctx)
	wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e.WaitFirstReconcile(wctx)
}

// waitState polls until the machine is in state s (bounded).
func (f *fixture) waitState(id string, s record.State) record.Machine {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, err := f.e.Get(context.Background(), id)
		if err != nil {
			f.t.Fatal(err)
		}
		if m.State == s {
			return m
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("machine %s: state %s, want %s (last_error %q)", id, m.State, s, m.LastError)
		}
		time.Sleep(time.Millisecond)
	}
}

func codeOf(err error) record.Code {
	if e, ok := err.(*record.Error); ok {
		return e.Code
	}
	return 0
}

func tok(shard string, e, s int64) record.Token {
	return record.Token{ShardID: shard, Epoch: e, Sequence: s}
}

// toIdle creates a machine and waits for IDLE.
func (f *fixture) toIdle(id string) {
	f.t.Helper()
	if _, err := f.e.Create(context.Background(), record.CreateRequest{MachineID: id}); err != nil {
		f.t.Fatal(err)
	}
	f.waitState(id, record.Idle)
}

// toConfigured takes a machine to CONFIGURED for cluster c.
func (f *fixture) toConfigured(id, c string) {
	f.t.Helper()
	f.toIdle(id)
	if _, err := f.e.Configure(context.Background(), record.ConfigureRequest{MachineID: id, ClusterID: c}); err != nil {
		f.t.Fatal(err)
	}
	f.waitState(id, record.Configured)
}
