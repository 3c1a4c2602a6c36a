package lifecycle

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func TestReconcile(t *testing.T) {
	t.Parallel()
	now := time.Now()
	clock := func() time.Time { return now }
	f := newFixture(t, 4, func(c *Config) { c.Now = clock })
	ctx := t.Context()
	f.toIdle("m000")
	f.toIdle("m001")
	now = now.Add(time.Second)

	// Nothing changed: the revision must not move.
	before, _ := f.e.List(ctx, record.ListQuery{})
	f.e.Reconcile(ctx)
	if d, _ := f.e.List(ctx, record.ListQuery{Since: before.Revision}); len(d.Machines) != 0 {
		t.Fatalf("idle reconcile changed %d machines", len(d.Machines))
	}

	// A VM vanished behind our back; a domain of ours shows up for a slot
	// (e.g. the state file was lost).
	f.be.mu.Lock()
	delete(f.be.vms, "m000")
	f.be.vms["m003"] = backend.Observed{MachineID: "m003", OperationID: "op-x", ClusterID: "cl",
		Placement: backend.Placement{Zone: "zone-b", Domain: "bf-m003"}, ShardMetadata: map[string]string{"a": "b"}}
	f.be.mu.Unlock()
	rep := f.e.Reconcile(ctx)
	if rep.Vanished != 1 || rep.Adopted != 1 {
		t.Fatalf("report %+v", rep)
	}
	m0, _ := f.e.Get(ctx, "m000")
	if m0.State != record.Failed || !strings.Contains(m0.LastError, "vanished") {
		t.Fatalf("vanished VM: %+v", m0)
	}
	m3, _ := f.e.Get(ctx, "m003")
	if m3.State != record.Configured || m3.Cluster != "cl" || m3.Host.Ref != "zone-b/bf-m003" || m3.OperationID != "op-x" {
		t.Fatalf("adopted: %+v", m3)
	}
	before, _ = f.e.List(ctx, record.ListQuery{})
	f.e.Reconcile(ctx)
	if d, _ := f.e.List(ctx, record.ListQuery{Since: before.Revision}); len(d.Machines) != 0 {
		t.Fatalf("second reconcile changed %d machines", len(d.Machines))
	}
}

func TestReleaseFailed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	if _, err := f.e.Release(t.Context(), "m000"); codeOf(err) != record.CodeAborted {
		t.Fatalf("release of a SPECULATIVE machine: %v", err)
	}
	f.be.setFail(record.OpConfigure, errors.New("hook exited with status 3"))
	f.toIdle("m000")
	f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: "c"})
	f.waitState("m000", record.Failed)
	if _, err := f.e.Release(t.Context(), "m000"); err != nil {
		t.Fatal(err)
	}
	m := f.waitState("m000", record.Speculative)
	if m.Host != (record.HostRef{}) || m.Cluster != "" || m.LastError != "" {
		t.Fatalf("released: %+v", m)
	}
}
