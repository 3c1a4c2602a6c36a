package lifecycle

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/reconcile"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Issue 31's second-order cases: a pass never takes a decision that
// depends on all of a machine's copies from a partial listing, a Delete
// BigFleet saw succeed never comes back, and a stale copy never wins over
// the running one. Each test failed on the code before the fix.

// cutH2 marks zone-a's listing as covering h1 only (h2 unlisted:
// partitioned) while cut is set, as a backend with several hosts a zone
// reports a partial listing.
func cutH2(inv []backend.ZoneInventory, cut bool) []backend.ZoneInventory {
	for i := range inv {
		if inv[i].Zone != "zone-a" {
			continue
		}
		if cut {
			inv[i].Hosts, inv[i].Unlisted = []string{"h1"}, []string{"h2"}
		} else {
			inv[i].Hosts = []string{"h1", "h2"}
		}
	}
	return inv
}

// waitObserver records WaitingOnUnlisted.
type waitObserver struct {
	mu    sync.Mutex
	waits []string
}

func (w *waitObserver) TransitionFinished(record.OpKind, string, string, time.Duration) {}
func (w *waitObserver) WaitingOnUnlisted(zone, decision string) {
	w.mu.Lock()
	w.waits = append(w.waits, zone+" "+decision)
	w.mu.Unlock()
}

func (w *waitObserver) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.waits...)
}

// Case 1: the migration's destination h2 is partitioned (unlisted) and
// may run the guest: the paused source on h1 is not resumed — that would
// run the node twice — until the whole zone is listed; the pass says it
// waits (report, WARN, observer).
func TestMigrationRecoveryWaitsForUnlistedHosts(t *testing.T) {
	t.Parallel()
	obs := &waitObserver{}
	f, rb, logs := recFixture(t, nil, func(c *Config) { c.Observer = obs })
	rb.cut.Store(true)
	rep := f.e.Reconcile(context.Background())
	if calls := rb.seen(); len(calls) != 0 {
		t.Fatalf("recovered on a partial listing: %v", calls)
	}
	if len(rep.Waiting) != 1 || !strings.Contains(rep.Waiting[0], "m000: migration recovery waits for host(s) h2 of zone zone-a") {
		t.Fatalf("report waiting %q", rep.Waiting)
	}
	if w := obs.seen(); strings.Join(w, ",") != "zone-a "+reconcile.WaitMigrationRecovery {
		t.Fatalf("observer %v", w)
	}
	if !strings.Contains(logs.String(), "decision deferred until the whole zone is listed") {
		t.Fatalf("no WARN:\n%s", logs)
	}
	rb.cut.Store(false)
	f.e.Reconcile(context.Background())
	if calls := rb.seen(); strings.Join(calls, ";") != "m000 h1 h1" {
		t.Fatalf("recoveries once the zone is whole: %v", calls)
	}
}

// Case 1b: a spare copy is not removed on a partial listing either: the
// live copy may be on the unlisted host.
func TestDuplicateRemovalWaitsForUnlistedHosts(t *testing.T) {
	t.Parallel()
	f, db, _ := dupFixture(t, "", backend.Observed{Running: true, Run: backend.RunState{State: backend.RunRunning}})
	db.cut.Store(true)
	rep := f.e.Reconcile(context.Background())
	if removed, _ := db.seen(); len(removed) != 0 {
		t.Fatalf("removed on a partial listing: %v", removed)
	}
	if len(rep.Waiting) != 1 || !strings.Contains(rep.Waiting[0], "duplicate removal waits") {
		t.Fatalf("report waiting %q", rep.Waiting)
	}
	db.cut.Store(false)
	f.e.Reconcile(context.Background())
	if removed, _ := db.seen(); strings.Join(removed, ",") != "m000 h2 h1" {
		t.Fatalf("removed once the zone is whole: %v", removed)
	}
}

// Case 2: a copy bound to the cluster survived on h2 (duplicate handling
// keeps bound copies). BigFleet Deletes the machine; the next pass must
// not adopt that copy under the SPECULATIVE record (the machine would come
// back CONFIGURED): it removes it as the Delete's leftover.
func TestDeletedMachineNeverComesBack(t *testing.T) {
	t.Parallel()
	f, db, logs := dupFixture(t, "c1", backend.Observed{Running: true, ClusterID: "c1", Run: backend.RunState{State: backend.RunRunning}})
	f.e.Reconcile(context.Background()) // the bound copy is kept
	ctx := context.Background()
	if _, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	f.waitState("m000", record.Idle)
	if _, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	f.waitState("m000", record.Speculative)
	f.e.Reconcile(ctx)
	m, _ := f.e.Get(ctx, "m000")
	if m.State != record.Speculative || m.Cluster != "" {
		t.Fatalf("a deleted machine came back %s for %q", m.State, m.Cluster)
	}
	db.mu.Lock()
	deletes := strings.Join(db.deletes, ",")
	db.mu.Unlock()
	if !strings.HasSuffix(deletes, ",h2") {
		t.Fatalf("deletes on hosts %q; want the leftover on h2 removed", deletes)
	}
	h := m.History[len(m.History)-1]
	if h.Outcome != reconcile.OutcomeLeftoverRemoved || !strings.Contains(h.Note, "host h2 outlived the machine's Delete") {
		t.Fatalf("history %+v", h)
	}
	if !strings.Contains(logs.String(), "a deleted machine's leftover domain removed") {
		t.Fatalf("no WARN:\n%s", logs)
	}
	f.e.Reconcile(ctx) // nothing left
	if m, _ := f.e.Get(ctx, "m000"); m.State != record.Speculative {
		t.Fatalf("then %s", m.State)
	}
}

// Case 3: the recorded host's copy is shut off (a virsh migrate without
// --undefinesource left it defined) while the guest runs on h2: the
// machine follows the running copy, and the stale one is never started.
func TestStaleCopyNeverWinsOverTheRunningOne(t *testing.T) {
	t.Parallel()
	f, db, _ := dupFixture(t, "c1", backend.Observed{Running: true, ClusterID: "c1", Run: backend.RunState{State: backend.RunRunning}})
	f.be.mu.Lock()
	o := f.be.vms["m000"]
	o.Running, o.Run = false, backend.RunState{State: backend.RunShutoff, Reason: "migrated"}
	f.be.vms["m000"] = o
	f.be.mu.Unlock()
	rep := f.e.Reconcile(context.Background())
	m := f.waitState("m000", record.Configured)
	if m.HostName != "h2" {
		t.Fatalf("machine on %q; want h2, where the guest runs", m.HostName)
	}
	if rep.Restarted != 0 {
		t.Fatalf("restarted the stale copy: %+v", rep)
	}
	if removed, _ := db.seen(); len(removed) != 0 {
		t.Fatalf("removed %v: the stale copy is bound to the cluster, kept for the operator", removed)
	}
}
