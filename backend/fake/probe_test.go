package fake

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

func probe(t *testing.T, b *Backend, id, op string, p backend.Placement) (backend.ConfigureTrace, error) {
	t.Helper()
	return b.ProbeConfigure(t.Context(), backend.ConfigureSpec{MachineID: id, OperationID: op, Placement: p})
}

// Only the trace of the operation asked about counts: a finished
// Configure's op reads finished ok, any other op (an older or a cut one)
// never started.
func TestProbeKeyedByOperation(t *testing.T) {
	t.Parallel()
	b := New(Options{})
	p := mustCreate(t, b, "m1", "zone-a")
	if tr, err := probe(t, b, "m1", "op-1", p); err != nil || tr.Hook != backend.HookNeverStarted {
		t.Fatalf("before any Configure: %v %v", tr, err)
	}
	if err := b.Configure(t.Context(), backend.ConfigureSpec{MachineID: "m1", OperationID: "op-1", Placement: p, ClusterID: "c"}); err != nil {
		t.Fatal(err)
	}
	if tr, err := probe(t, b, "m1", "op-1", p); err != nil || tr.Hook != backend.HookSucceeded {
		t.Fatalf("finished op: %v %v", tr, err)
	}
	if tr, err := probe(t, b, "m1", "op-2", p); err != nil || tr.Hook != backend.HookNeverStarted {
		t.Fatalf("another op: %v %v", tr, err)
	}
}

// A Configure cut during its delay (the fake's work) left no trace: never
// started, and FinishConfigure refuses it.
func TestProbeCutConfigureNeverStarted(t *testing.T) {
	t.Parallel()
	b := New(Options{Delays: map[string]time.Duration{OpConfigure: time.Hour}})
	p := mustCreate(t, b, "m1", "zone-a")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	spec := backend.ConfigureSpec{MachineID: "m1", OperationID: "op-1", Placement: p, ClusterID: "c"}
	if err := b.Configure(ctx, spec); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cut configure: %v", err)
	}
	if tr, err := probe(t, b, "m1", "op-1", p); err != nil || tr.Hook != backend.HookNeverStarted {
		t.Fatalf("cut op: %v %v", tr, err)
	}
	if err := b.FinishConfigure(t.Context(), spec); err == nil {
		t.Fatal("finished a Configure whose hook never ran")
	}
	if _, ok := b.Binding("m1"); ok {
		t.Fatal("binding recorded")
	}
}

// FinishConfigure records the binding only after a hook that finished ok.
func TestFinishConfigureNeedsASucceededHook(t *testing.T) {
	t.Parallel()
	b := New(Options{})
	p := mustCreate(t, b, "m1", "zone-a")
	spec := backend.ConfigureSpec{MachineID: "m1", OperationID: "op-1", Placement: p, ClusterID: "c", ShardMetadata: map[string]string{"k": "v"}}
	for _, tr := range []backend.ConfigureTrace{{Hook: backend.HookFailed, ExitCode: 2}, {Hook: backend.HookVanished}, {Hook: backend.HookRunning}} {
		if err := b.SetBootstrapTrace("m1", "op-1", tr); err != nil {
			t.Fatal(err)
		}
		if got, err := probe(t, b, "m1", "op-1", p); err != nil || got != tr {
			t.Fatalf("probe %v %v, want %v", got, err, tr)
		}
		if err := b.FinishConfigure(t.Context(), spec); err == nil {
			t.Fatalf("finished after a hook %s", tr.Hook)
		}
	}
	_ = b.SetBootstrapTrace("m1", "op-1", backend.ConfigureTrace{Hook: backend.HookSucceeded})
	if err := b.FinishConfigure(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if bd, ok := b.Binding("m1"); !ok || bd.ClusterID != "c" || bd.OperationID != "op-1" || bd.ShardMetadata["k"] != "v" {
		t.Fatalf("binding %+v %v", bd, ok)
	}
}

// A VM that is gone answers ErrNotFound (what a restarted provider serving
// the fake sees: its VMs died with it); one not running cannot be asked.
func TestProbeGoneOrStopped(t *testing.T) {
	t.Parallel()
	b := New(Options{})
	if _, err := probe(t, b, "nope", "op", backend.Placement{Zone: "zone-a"}); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("gone: %v", err)
	}
	p := mustCreate(t, b, "m1", "zone-a")
	b.SetRunState("m1", backend.RunState{State: backend.RunShutoff})
	if _, err := probe(t, b, "m1", "op", p); !errors.Is(err, backend.ErrNotRunning) {
		t.Fatalf("stopped: %v", err)
	}
}
