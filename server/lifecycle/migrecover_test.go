package lifecycle

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/reconcile"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// recBackend lists m000's copy on h1 (testBackend's VM) in the run state
// src and a copy on h2 in dst, and plays the libvirt backend's decision
// when asked to recover: a running copy is live, else h1's is resumed.
type recBackend struct {
	*testBackend
	mu    sync.Mutex
	dst   *backend.Observed
	calls []string // "machine recorded-host copies-hosts"
	// during, when set, runs as RecoverMigration is called.
	during func()
	cut    atomic.Bool // zone-a listed without h2 (cutH2)
}

func (b *recBackend) Inventory(ctx context.Context) []backend.ZoneInventory {
	inv := b.testBackend.Inventory(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dst != nil {
		inv[0].Machines = append(inv[0].Machines, *b.dst)
	}
	return cutH2(inv, b.cut.Load())
}

func (b *recBackend) RecoverMigration(_ context.Context, id string, recorded backend.Placement, copies []backend.Placement) (backend.MigrationRecovery, error) {
	if b.during != nil {
		b.during()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	hosts := make([]string, len(copies))
	for i, c := range copies {
		hosts[i] = c.Host
	}
	b.calls = append(b.calls, id+" "+recorded.Host+" "+strings.Join(hosts, ","))
	b.testBackend.mu.Lock()
	defer b.testBackend.mu.Unlock()
	src := b.vms[id]
	if b.dst != nil && b.dst.Run.Up() { // completed: the paused source goes
		live := b.dst.Placement
		b.vms[id] = *b.dst
		b.dst = nil
		return backend.MigrationRecovery{Live: live, Completed: true, Removed: []backend.Placement{src.Placement}}, nil
	}
	res := backend.MigrationRecovery{Live: src.Placement, Resumed: true}
	if b.dst != nil {
		res.Removed = []backend.Placement{b.dst.Placement}
		b.dst = nil
	}
	src.Running, src.Run = true, backend.RunState{State: backend.RunRunning, Reason: "unpaused"}
	b.vms[id] = src
	return res, nil
}

func (b *recBackend) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.calls...)
}

var pausedByMigration = backend.RunState{State: backend.RunPaused, Reason: "migrating"}

// recFixture: m000 CONFIGURED on h1 of zone-a, its copy there paused by a
// migration, and (if dst is set) a copy on h2 in state dst.
func recFixture(t *testing.T, dst *backend.RunState, tweak ...func(*Config)) (*fixture, *recBackend, *bytes.Buffer) {
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	rb := &recBackend{testBackend: f.be}
	f.wrap = rb
	logs := &bytes.Buffer{}
	var mu sync.Mutex
	f.start(2, append([]func(*Config){func(c *Config) { c.Logger = slog.New(slog.NewJSONHandler(lockedWriter{&mu, logs}, nil)) }}, tweak...)...)
	f.toConfigured("m000", "c1")
	f.be.mu.Lock()
	o := f.be.vms["m000"]
	o.Placement.Host, o.ClusterID, o.Running, o.Run = "h1", "c1", true, pausedByMigration
	f.be.vms["m000"] = o
	f.be.mu.Unlock()
	setHost(t, f, "m000", "h1")
	if dst != nil {
		c := o
		c.Placement.Host, c.Run, c.Running = "h2", *dst, true
		rb.dst = &c
	}
	return f, rb, logs
}

// The destination runs and the source is paused: the migration had
// completed. The stale source goes, the machine is recorded on h2, and
// the history and a WARN line say so.
func TestRecoverMigrationCompleted(t *testing.T) {
	t.Parallel()
	f, rb, logs := recFixture(t, &backend.RunState{State: backend.RunRunning, Reason: "migrated"})
	f.e.Reconcile(context.Background())
	if calls := rb.seen(); strings.Join(calls, ";") != "m000 h1 h1,h2" {
		t.Fatalf("recoveries %v", calls)
	}
	m := f.waitState("m000", record.Configured)
	h := m.History[len(m.History)-1]
	if m.HostName != "h2" || h.Outcome != reconcile.OutcomeMigrationRecovered || !strings.Contains(h.Note, "had completed") || !strings.Contains(h.Note, "copy on host h1 removed") {
		t.Fatalf("host %q, history %+v", m.HostName, h)
	}
	if !strings.Contains(logs.String(), `"msg":"reconcile: interrupted migration recovered"`) {
		t.Fatalf("no WARN:\n%s", logs)
	}
	f.e.Reconcile(context.Background())
	if calls := rb.seen(); len(calls) != 1 {
		t.Fatalf("recovered again: %v", calls)
	}
}

// Both copies paused (the destination never ran the guest): the
// migration had not completed. The source is resumed where the record
// says, the destination's copy removed.
func TestRecoverMigrationNotCompleted(t *testing.T) {
	t.Parallel()
	f, rb, _ := recFixture(t, &pausedByMigration)
	f.e.Reconcile(context.Background())
	if calls := rb.seen(); strings.Join(calls, ";") != "m000 h1 h1,h2" {
		t.Fatalf("recoveries %v", calls)
	}
	m := f.waitState("m000", record.Configured)
	h := m.History[len(m.History)-1]
	if m.HostName != "h1" || h.Outcome != reconcile.OutcomeMigrationRecovered || !strings.Contains(h.Note, "had not completed: the VM resumed on host h1") {
		t.Fatalf("host %q, history %+v", m.HostName, h)
	}
}

// A recovery records its outcome only on the record it was judged on: a
// Drain accepted while the recovery ran owns the machine's record, which
// keeps the host the pass had already followed the running guest to (h2)
// and gets no recovery entry (recordRecovery checks the operation id
// through update, like its siblings).
func TestRecoverMigrationStaleDoesNotOverwrite(t *testing.T) {
	t.Parallel()
	f, rb, _ := recFixture(t, &backend.RunState{State: backend.RunRunning, Reason: "migrated"})
	var drained string
	rb.during = func() {
		ack, err := f.e.Drain(context.Background(), record.DrainRequest{MachineID: "m000"})
		if err != nil {
			t.Errorf("drain during the recovery: %v", err)
		}
		drained = ack.OperationID
	}
	f.e.Reconcile(context.Background())
	if calls := rb.seen(); len(calls) != 1 {
		t.Fatalf("recoveries %v", calls)
	}
	m := f.waitState("m000", record.Idle)
	if m.OperationID != drained || m.HostName != "h2" {
		t.Fatalf("op %q host %q, want the drain's %q on h2", m.OperationID, m.HostName, drained)
	}
	for _, h := range m.History {
		if h.Outcome == reconcile.OutcomeMigrationRecovered {
			t.Fatalf("a stale recovery wrote into the newer record: %+v", h)
		}
	}
}

// A source paused by a migration with no copy elsewhere (libvirt removed
// the destination's) is resumed too.
func TestRecoverMigrationSourceOnly(t *testing.T) {
	t.Parallel()
	f, rb, _ := recFixture(t, nil)
	f.e.Reconcile(context.Background())
	if calls := rb.seen(); strings.Join(calls, ";") != "m000 h1 h1" {
		t.Fatalf("recoveries %v", calls)
	}
	if h := f.waitState("m000", record.Configured).History; !strings.Contains(h[len(h)-1].Note, "resumed on host h1; nothing removed") {
		t.Fatalf("history %+v", h[len(h)-1])
	}
}

// A migration of this process holds the machine: its paused source is
// not touched.
func TestRecoverMigrationSkipsAMoveUnderWay(t *testing.T) {
	t.Parallel()
	f, rb, _ := recFixture(t, &pausedByMigration)
	if !f.e.moves.Take("m000", "h2", f.e.cfg.Now()) {
		t.Fatal("hold")
	}
	f.e.Reconcile(context.Background())
	if calls := rb.seen(); len(calls) != 0 {
		t.Fatalf("recovered during a migration: %v", calls)
	}
}

// recoveryCounter is an Observer that counts recoveries by zone/outcome.
type recoveryCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *recoveryCounter) TransitionFinished(record.OpKind, string, string, time.Duration) {}

func (r *recoveryCounter) MigrationRecovered(zone, outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[zone+"/"+outcome]++
}

// Each recovery reaches the observer once, with its outcome.
func TestRecoverMigrationObserved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dst  *backend.RunState
		want string
	}{
		{&backend.RunState{State: backend.RunRunning, Reason: "migrated"}, "zone-a/completed"},
		{&pausedByMigration, "zone-a/resumed"},
	} {
		obs := &recoveryCounter{n: map[string]int{}}
		f, _, _ := recFixture(t, tc.dst, func(c *Config) { c.Observer = obs })
		f.e.Reconcile(context.Background())
		f.e.Reconcile(context.Background())
		obs.mu.Lock()
		got := maps.Clone(obs.n)
		obs.mu.Unlock()
		if len(got) != 1 || got[tc.want] != 1 {
			t.Errorf("observed %v, want %s once", got, tc.want)
		}
	}
}
