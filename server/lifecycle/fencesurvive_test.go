package lifecycle

import (
	"context"
	"maps"
	"sync"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// recordingBackend is the test backend plus what a real one records on
// the host with a machine: its binding and the fence marks each write
// carried. It forgets nothing when the engine's store is replaced, as a
// host does not when the state file is lost.
type recordingBackend struct {
	*testBackend
	mu  sync.Mutex
	rec map[string]backend.Observed // ClusterID, ShardMetadata, Marks by machine id
}

func newRecordingBackend(be *testBackend) *recordingBackend {
	return &recordingBackend{testBackend: be, rec: map[string]backend.Observed{}}
}

func (b *recordingBackend) Create(ctx context.Context, s backend.MachineSpec) (backend.Placement, error) {
	p, err := b.testBackend.Create(ctx, s)
	if err == nil {
		b.record(s.MachineID, func(o *backend.Observed) { *o = backend.Observed{Marks: maps.Clone(s.Marks)} })
	}
	return p, err
}

func (b *recordingBackend) Configure(ctx context.Context, s backend.ConfigureSpec) error {
	err := b.testBackend.Configure(ctx, s)
	if err == nil {
		b.record(s.MachineID, func(o *backend.Observed) {
			o.ClusterID, o.ShardMetadata, o.Marks = s.ClusterID, maps.Clone(s.ShardMetadata), maps.Clone(s.Marks)
		})
	}
	return err
}

func (b *recordingBackend) Drain(ctx context.Context, s backend.DrainSpec) error {
	err := b.testBackend.Drain(ctx, s)
	if err == nil {
		b.record(s.MachineID, func(o *backend.Observed) { o.ClusterID, o.ShardMetadata, o.Marks = "", nil, maps.Clone(s.Marks) })
	}
	return err
}

func (b *recordingBackend) record(id string, edit func(*backend.Observed)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := b.rec[id]
	edit(&o)
	b.rec[id] = o
}

func (b *recordingBackend) marks(id string) map[string]fm {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.rec[id].Marks)
}

func (b *recordingBackend) Inventory(ctx context.Context) []backend.ZoneInventory {
	inv := b.testBackend.Inventory(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range inv {
		for j := range inv[i].Machines {
			o := &inv[i].Machines[j]
			r := b.rec[o.MachineID]
			o.ClusterID, o.ShardMetadata, o.Marks = r.ClusterID, maps.Clone(r.ShardMetadata), maps.Clone(r.Marks)
		}
	}
	return inv
}

// TestFenceSurvivesLostState (issue 15 case 5): a machine created and
// configured under epoch 5 keeps its marks on the host; after the state
// file is lost and the engine restarts, the machine comes back CONFIGURED
// from the host, a token of epoch 4 is FailedPrecondition and changes
// nothing, and epoch 6 passes. Before the fix the epoch-4 Drain was
// accepted.
func TestFenceSurvivesLostState(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	rb := newRecordingBackend(f.be)
	f.wrap = rb
	f.start(3)
	ctx := t.Context()
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m001", Token: tok("s1", 5, 1)}); err != nil {
		t.Fatal(err)
	}
	f.waitState("m001", record.Idle)
	if _, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m001", ClusterID: "c1", Token: tok("s1", 5, 2)}); err != nil {
		t.Fatal(err)
	}
	f.waitState("m001", record.Configured)
	if got, want := rb.marks("m001"), map[string]fm{"s1": {Epoch: 5, Sequence: 2}}; !maps.Equal(got, want) {
		t.Fatalf("marks recorded on the host by Configure: %v, want %v (execute in run.go must hand the backend e.machineMarks)", got, want)
	}

	f.e.Close()
	f.st = newMemStore() // the state file is lost
	f.start(3)
	m := f.waitState("m001", record.Configured) // rebuilt from the host
	if m.Cluster != "c1" {
		t.Fatalf("rebuilt machine: %+v", m)
	}
	if got := f.e.Marks()[record.MarkKey{ShardID: "s1", MachineID: "m001"}]; got != (record.Mark{Epoch: 5, Sequence: 2}) {
		t.Fatalf("mark after the rebuild: %+v, want epoch 5 sequence 2", got)
	}
	_, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m001", Token: tok("s1", 4, 99)})
	if codeOf(err) != record.CodeFenced {
		t.Fatalf("stale token (epoch 4 after epoch 5) after a lost state file: %v, want FailedPrecondition (Reconcile must call e.restoreMarks before adopting)", err)
	}
	if m, _ := f.e.Get(ctx, "m001"); m.State != record.Configured {
		t.Fatalf("refused drain changed the machine: %s", m.State)
	}
	if _, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m001", Token: tok("s1", 6, 0)}); err != nil {
		t.Fatalf("newer token (epoch 6): %v", err)
	}
	f.waitState("m001", record.Idle)
	if got, want := rb.marks("m001"), map[string]fm{"s1": {Epoch: 6, Sequence: 0}}; !maps.Equal(got, want) {
		t.Fatalf("marks recorded by Drain: %v, want %v", got, want)
	}
}

// TestRebuiltWithoutMarksAccepts: a machine whose host recorded no marks
// (an older provider version) is rebuilt and accepts the next token, as
// at first contact (the choice documented in docs/contract.md).
func TestRebuiltWithoutMarksAccepts(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	rb := newRecordingBackend(f.be)
	f.wrap = rb
	f.start(2)
	f.toConfigured("m001", "c1")
	rb.record("m001", func(o *backend.Observed) { o.Marks = nil })
	f.e.Close()
	f.st = newMemStore()
	f.start(2)
	f.waitState("m001", record.Configured)
	if _, err := f.e.Drain(t.Context(), record.DrainRequest{MachineID: "m001", Token: tok("s1", 1, 0)}); err != nil {
		t.Fatalf("first token on a machine rebuilt without marks: %v", err)
	}
}
