package lifecycle

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/reconcile"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// dupBackend lists extra copies of machines beside testBackend's VMs and
// records RemoveCopy calls (removing the copy from its listing).
type dupBackend struct {
	*testBackend
	mu      sync.Mutex
	extra   []backend.Observed
	removed []string    // "machine spare-host keep-host"
	events  []string    // DuplicateDomain outcomes
	deletes []string    // the host of each Delete
	cut     atomic.Bool // zone-a listed without h2 (cutH2)
}

// Delete removes an extra copy on the placement's host if there is one
// (a leftover), else the testBackend's VM.
func (b *dupBackend) Delete(ctx context.Context, s backend.DeleteSpec) error {
	b.mu.Lock()
	b.deletes = append(b.deletes, s.Placement.Host)
	for i, o := range b.extra {
		if o.MachineID == s.MachineID && o.Placement.Host == s.Placement.Host {
			b.extra = append(b.extra[:i], b.extra[i+1:]...)
			b.mu.Unlock()
			return nil
		}
	}
	b.mu.Unlock()
	return b.testBackend.Delete(ctx, s)
}

func (b *dupBackend) Inventory(ctx context.Context) []backend.ZoneInventory {
	inv := b.testBackend.Inventory(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range b.extra {
		for i := range inv {
			if inv[i].Zone == o.Placement.Zone {
				inv[i].Machines = append(inv[i].Machines, o)
			}
		}
	}
	return cutH2(inv, b.cut.Load())
}

func (b *dupBackend) RemoveCopy(_ context.Context, id string, spare, keep backend.Placement) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.removed = append(b.removed, id+" "+spare.Host+" "+keep.Host)
	for i, o := range b.extra {
		if o.MachineID == id && o.Placement.Host == spare.Host {
			b.extra = append(b.extra[:i], b.extra[i+1:]...)
			break
		}
	}
	return nil
}

func (b *dupBackend) TransitionFinished(record.OpKind, string, string, time.Duration) {}
func (b *dupBackend) DuplicateDomain(zone, outcome string) {
	b.mu.Lock()
	b.events = append(b.events, zone+" "+outcome)
	b.mu.Unlock()
}

func (b *dupBackend) seen() (removed, events []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.removed...), append([]string(nil), b.events...)
}

// dupFixture: m000 IDLE (or CONFIGURED for cluster) on host h1 of
// zone-a, and a copy of it on h2 as listed.
func dupFixture(t *testing.T, cluster string, copyOnH2 backend.Observed) (*fixture, *dupBackend, *bytes.Buffer) {
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	db := &dupBackend{testBackend: f.be}
	f.wrap = db
	logs := &bytes.Buffer{}
	var mu sync.Mutex
	f.start(2, func(c *Config) {
		c.Observer = db
		c.Logger = slog.New(slog.NewJSONHandler(lockedWriter{&mu, logs}, nil))
	})
	if cluster == "" {
		f.toIdle("m000")
	} else {
		f.toConfigured("m000", cluster)
	}
	// The record names h1; the testBackend's own VM is the copy on h1.
	f.be.mu.Lock()
	o := f.be.vms["m000"]
	o.Placement.Host, o.ClusterID = "h1", cluster
	f.be.vms["m000"] = o
	f.be.mu.Unlock()
	setHost(t, f, "m000", "h1")
	copyOnH2.MachineID, copyOnH2.Placement = "m000", backend.Placement{Zone: "zone-a", Host: "h2", Domain: o.Placement.Domain}
	db.mu.Lock()
	db.extra = []backend.Observed{copyOnH2}
	db.mu.Unlock()
	return f, db, logs
}

// setHost records host as the machine's host, as a Create through a
// Placer does.
func setHost(t *testing.T, f *fixture, id, host string) {
	if _, err := f.e.update(id, record.Expect{}, func(_, n *record.Machine) error { n.HostName = host; return nil }); err != nil {
		t.Fatal(err)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A running, never-configured copy on another host than the record's is
// removed; the history, the log and the metric say so; the record stays.
func TestDuplicateSpareRemoved(t *testing.T) {
	t.Parallel()
	f, db, logs := dupFixture(t, "", backend.Observed{Running: true, Run: backend.RunState{State: backend.RunRunning}})
	f.e.Reconcile(context.Background())
	removed, events := db.seen()
	if strings.Join(removed, ",") != "m000 h2 h1" || strings.Join(events, ",") != "zone-a removed" {
		t.Fatalf("removed %v, events %v", removed, events)
	}
	m := f.waitState("m000", record.Idle)
	h := m.History[len(m.History)-1]
	if m.HostName != "h1" || h.Outcome != reconcile.OutcomeDuplicateRemoved || !strings.Contains(h.Note, "also on host h2") {
		t.Fatalf("host %q, history %+v", m.HostName, h)
	}
	if !strings.Contains(logs.String(), `"msg":"reconcile: duplicate domain removed"`) {
		t.Fatalf("no WARN:\n%s", logs)
	}
	f.e.Reconcile(context.Background()) // nothing left to do
	if removed, _ := db.seen(); len(removed) != 1 {
		t.Fatalf("removed again: %v", removed)
	}
}

// A copy bound to a cluster may be a live node: it is reported, never
// removed, and the machine is not moved onto it.
func TestDuplicateBoundCopyKept(t *testing.T) {
	t.Parallel()
	f, db, logs := dupFixture(t, "c1", backend.Observed{Running: true, ClusterID: "c1", Run: backend.RunState{State: backend.RunRunning}})
	f.e.Reconcile(context.Background())
	removed, events := db.seen()
	if len(removed) != 0 || strings.Join(events, ",") != "zone-a kept" {
		t.Fatalf("removed %v, events %v", removed, events)
	}
	if m := f.waitState("m000", record.Configured); m.HostName != "h1" {
		t.Fatalf("moved to %q", m.HostName)
	}
	if !strings.Contains(logs.String(), `bound to cluster \"c1\"`) {
		t.Fatalf("no WARN naming why:\n%s", logs)
	}
}

// A paused copy (a migration's) is left to the migration's recovery.
func TestDuplicatePausedCopyKept(t *testing.T) {
	t.Parallel()
	f, db, _ := dupFixture(t, "", backend.Observed{Run: backend.RunState{State: backend.RunPaused}})
	f.e.Reconcile(context.Background())
	if removed, events := db.seen(); len(removed) != 0 || strings.Join(events, ",") != "zone-a kept" {
		t.Fatalf("removed %v, events %v", removed, events)
	}
}

// Without a recorded host the record's cluster binding says which copy is
// the machine: the unbound copy on h1 goes, the bound one on h2 stays.
func TestDuplicateKeptByBinding(t *testing.T) {
	t.Parallel()
	f, db, _ := dupFixture(t, "c1", backend.Observed{Running: true, ClusterID: "c1", Run: backend.RunState{State: backend.RunRunning}})
	setHost(t, f, "m000", "")
	f.be.mu.Lock()
	o := f.be.vms["m000"]
	o.ClusterID = "" // the record's own copy never got the binding
	f.be.vms["m000"] = o
	f.be.mu.Unlock()
	f.e.Reconcile(context.Background())
	if removed, _ := db.seen(); strings.Join(removed, ",") != "m000 h1 h2" {
		t.Fatalf("removed %v, want the unbound copy on h1", removed)
	}
}
