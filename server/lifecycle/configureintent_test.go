package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/reconcile"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// cutConfigureAndLoseState accepts a Configure of m000 (cluster c, shard
// metadata k=v) on a fake whose Configure then hangs (its intent is on
// the VM, its "hook" not finished), lets trace say what the guest shows
// of the hook, stops the provider as a kill would, and returns a provider
// rebuilt on be from an empty state file, started and listed once, with
// the Configure's operation id: a failover, or a lost state file.
func cutConfigureAndLoseState(t *testing.T, trace *backend.ConfigureTrace) (*Engine, *fake.Backend, string) {
	t.Helper()
	be := fake.New(fake.Options{})
	e := newStreamEngine(t, be, 2)
	startListed(e, context.Background())
	if _, err := e.Create(t.Context(), record.CreateRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m000 IDLE", func() bool { m, _ := e.Get(t.Context(), "m000"); return m.State == record.Idle })
	be.SetHang(fake.OpConfigure, true)
	ack, err := e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: "c",
		BootstrapBlob: []byte("secret"), ShardMetadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the intent on the VM", func() bool {
		vm, _ := be.VM("m000")
		return vm.ConfigureIntent != nil && vm.ConfigureIntent.OperationID == ack.OperationID
	})
	if trace != nil {
		if err := be.SetBootstrapTrace("m000", ack.OperationID, *trace); err != nil {
			t.Fatal(err)
		}
	}
	kill, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	e.Shutdown(kill)
	cancel()
	be.SetHang(fake.OpConfigure, false)

	e2 := newStreamEngine(t, be, 2) // a new, empty store: the state file is lost
	startListed(e2, context.Background())
	return e2, be, ack.OperationID
}

// settled waits until m000 leaves CONFIGURING on e and returns it.
func settled(t *testing.T, e *Engine) record.Machine {
	t.Helper()
	var m record.Machine
	waitFor(t, "m000 out of CONFIGURING", func() bool {
		m, _ = e.Get(t.Context(), "m000")
		return m.State != record.Configuring && m.State != record.Speculative
	})
	return m
}

// resumedEntry is the history entry of the resumed Configure op.
func resumedEntry(t *testing.T, m record.Machine, op string) record.Transition {
	t.Helper()
	for _, h := range m.History {
		if h.OperationID == op && h.Kind == record.OpConfigure && strings.Contains(h.Note, reconcile.OutcomeConfigureResumed) {
			return h
		}
	}
	t.Fatalf("no resumed Configure %s in the history %+v", op, m.History)
	return record.Transition{}
}

// A Configure cut before its hook started, then the state file lost: the
// rebuilt provider does not adopt the machine IDLE from its bare domain;
// it takes the Configure over from the domain's intent, asks the guest,
// and rolls it back to IDLE saying why; the intent is gone from the domain
// and no binding was recorded. Before the intent it came back IDLE with no
// word of the Configure.
func TestCutConfigureLostStateNeverStartedRollsBack(t *testing.T) {
	t.Parallel()
	e, be, op := cutConfigureAndLoseState(t, nil)
	m := settled(t, e)
	if m.State != record.Idle || !strings.Contains(m.LastError, "rolled back to IDLE") || m.Cluster != "" {
		t.Fatalf("m000: %s cluster %q last_error %q; want IDLE, rolled back", m.State, m.Cluster, m.LastError)
	}
	if h := resumedEntry(t, m, op); h.Outcome != "rolled_back" || h.To != record.Idle {
		t.Errorf("history entry %+v", h)
	}
	vm, _ := be.VM("m000")
	if vm.ConfigureIntent != nil || vm.Binding != nil {
		t.Errorf("VM after the rollback: intent %+v binding %+v; want neither", vm.ConfigureIntent, vm.Binding)
	}
	// Another pass adopts nothing anew, and a new Configure is accepted.
	e.Reconcile(t.Context())
	if _, err := e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: "c2"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m000 CONFIGURED for c2", func() bool {
		m, _ := e.Get(t.Context(), "m000")
		return m.State == record.Configured && m.Cluster == "c2"
	})
}

// The hook had finished ok: the rebuilt provider finishes the Configure
// and the machine is CONFIGURED for its cluster and shard metadata, under
// the cut operation's id, the binding recorded on the domain.
func TestCutConfigureLostStateHookSucceededConfigured(t *testing.T) {
	t.Parallel()
	e, be, op := cutConfigureAndLoseState(t, &backend.ConfigureTrace{Hook: backend.HookSucceeded})
	m := settled(t, e)
	if m.State != record.Configured || m.Cluster != "c" || m.ShardMetadata["k"] != "v" || m.OperationID != op || m.LastError != "" {
		t.Fatalf("m000: %+v; want CONFIGURED for c under %s", m, op)
	}
	if h := resumedEntry(t, m, op); h.Outcome != "succeeded" || h.To != record.Configured {
		t.Errorf("history entry %+v", h)
	}
	vm, _ := be.VM("m000")
	if vm.ConfigureIntent != nil || vm.Binding == nil || vm.Binding.ClusterID != "c" || vm.Binding.OperationID != op {
		t.Errorf("VM: intent %+v binding %+v", vm.ConfigureIntent, vm.Binding)
	}
}

// The hook had failed: FAILED with the exit status as cause, never IDLE.
func TestCutConfigureLostStateHookFailedFails(t *testing.T) {
	t.Parallel()
	e, _, op := cutConfigureAndLoseState(t, &backend.ConfigureTrace{Hook: backend.HookFailed, ExitCode: 3})
	m := settled(t, e)
	if m.State != record.Failed || !strings.Contains(m.LastError, "bootstrap hook had exited with status 3") {
		t.Fatalf("m000: %s last_error %q; want FAILED naming status 3", m.State, m.LastError)
	}
	if h := resumedEntry(t, m, op); h.Outcome != "failed" || h.LastError != m.LastError {
		t.Errorf("history entry %+v", h)
	}
}
