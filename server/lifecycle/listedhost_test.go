package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// hostsBackend is a testBackend whose zone-a is two hosts, h1 and h2; h2
// is unlisted (down) until up is set. Machines on h2 carry marks there.
type hostsBackend struct {
	*testBackend
	mu      sync.Mutex
	up      bool
	onH2    []backend.Observed
	created map[string]bool
}

func (b *hostsBackend) Inventory(ctx context.Context) []backend.ZoneInventory {
	inv := b.testBackend.Inventory(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range inv {
		if inv[i].Zone != "zone-a" {
			continue
		}
		inv[i].Hosts, inv[i].Unlisted = []string{"h1"}, []string{"h2"}
		if b.up {
			inv[i].Hosts, inv[i].Unlisted = []string{"h1", "h2"}, nil
			inv[i].Machines = append(inv[i].Machines, b.onH2...)
		}
	}
	return inv
}

func (b *hostsBackend) setUp() { b.mu.Lock(); b.up = true; b.mu.Unlock() }

// HostReady is backend.HostReadiness: h2 is down until setUp.
func (b *hostsBackend) HostReady(_, host string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if host == "h2" && !b.up {
		return backend.ErrHostUnavailable
	}
	return nil
}

// Issue 22 finding 3: the state file is lost and h2, which holds m000 with
// shard s1's mark (epoch 5), is down at restart. A stale token (epoch 3)
// for m000 is never accepted: Unavailable while h2 has not been listed,
// with no mark lowered; once h2 is listed, FailedPrecondition. A machine
// on h1 is not held up by h2.
func TestStaleTokenWaitsForItsHost(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	hb := &hostsBackend{testBackend: f.be}
	hb.onH2 = []backend.Observed{{MachineID: "m000", OperationID: "op-old", Running: true, ClusterID: "c1",
		Placement: backend.Placement{Zone: "zone-a", Host: "h2", Domain: "bf-m000"}, Run: backend.RunState{State: backend.RunRunning},
		Marks: map[string]backend.FenceMark{"s1": {Epoch: 5, Sequence: 1}}}}
	f.wrap = hb
	f.start(4) // a fresh store: the state file is gone
	ctx := context.Background()
	t0 := time.Now()
	_, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000", Token: tok("s1", 3, 1)})
	if codeOf(err) != record.CodeUnavailable || !strings.Contains(err.Error(), "not every host of zone") {
		t.Fatalf("stale token while h2 is down: %v, want Unavailable naming the zone's hosts", err)
	}
	if took := time.Since(t0); took > time.Second {
		t.Fatalf("refused after %s: h2 is down, no listing can come, so no wait", took)
	}
	if _, seen := f.e.fences.Durable(record.MarkKey{ShardID: "s1", MachineID: "m000"}); seen {
		t.Fatal("the refused mutation recorded its mark")
	}
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000"}); codeOf(err) != record.CodeUnavailable {
		t.Fatalf("Create of a machine whose host is down: %v, want Unavailable (its domain may be there)", err)
	}
	hb.setUp()
	f.e.Reconcile(ctx)
	if m := f.waitState("m000", record.Configured); m.HostName != "h2" {
		t.Fatalf("adopted on %q", m.HostName)
	}
	if _, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000", Token: tok("s1", 3, 1)}); codeOf(err) != record.CodeFenced {
		t.Fatalf("stale token after h2 was listed: %v, want FailedPrecondition", err)
	}
}

// Issue 38 case 5: after a clean restart (the state file intact) with h2
// dead, a Create of a SPECULATIVE slot the file holds proceeds: the
// record proves the machine has no domain anywhere, so the zone's first
// listing is enough. After a lost state file the same Create waits, as
// TestStaleTokenWaitsForItsHost shows (its domain may be on h2).
func TestIntactStateCreatesWithAHostDown(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	hb := &hostsBackend{testBackend: f.be}
	hb.up = true
	f.wrap = hb
	f.start(4)
	f.toIdle("m001")
	if _, err := f.e.Delete(context.Background(), record.DeleteRequest{MachineID: "m001"}); err != nil {
		t.Fatal(err)
	}
	f.waitState("m001", record.Speculative)
	f.e.Close()
	hb.mu.Lock()
	hb.up = false // h2 dies; the provider restarts on the same state file
	hb.mu.Unlock()
	f.start(4)
	ctx := context.Background()
	for _, id := range []string{"m000", "m001"} { // a seed never created; one deleted before the restart
		if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: id}); err != nil {
			t.Fatalf("Create of %s with h2 down after a clean restart: %v", id, err)
		}
		f.waitState(id, record.Idle)
	}
	f.e.Close()
	f.st = newMemStore() // the state file is lost: rebuilt records wait for every host
	f.start(4)
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m002"}); codeOf(err) != record.CodeUnavailable ||
		!strings.Contains(err.Error(), "not every host of zone") {
		t.Fatalf("Create of a rebuilt record with h2 down: %v, want Unavailable naming the zone", err)
	}
}

// allDownBackend is a testBackend whose zones, once allDown is set, have
// every host declared down: the zone takes no new machine (ZoneReady),
// but calls on a machine of a declared host are answered (HostReady).
type allDownBackend struct {
	*testBackend
	mu      sync.Mutex
	allDown bool
}

func (b *allDownBackend) ZoneReady(zone string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.allDown {
		return fmt.Errorf("zone %q: every host is declared down: %w", zone, backend.ErrHostUnavailable)
	}
	return nil
}

func (b *allDownBackend) HostReady(string, string) error { return nil }

// Create places every machine on host h1 (the test backend names none).
func (b *allDownBackend) Create(ctx context.Context, s backend.MachineSpec) (backend.Placement, error) {
	p, err := b.testBackend.Create(ctx, s)
	p.Host = "h1"
	return p, err
}

// A zone whose every host is declared down refuses a Create as
// Unavailable (the long lab soak saw such Creates accepted and FAILED
// "no host fits"), while a Delete of a machine there is accepted and
// completes.
func TestAllHostsDownRefusesCreatesNotDeletes(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	ab := &allDownBackend{testBackend: f.be}
	f.wrap = ab
	f.start(2)
	ctx := context.Background()
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok("s", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	f.waitState("m000", record.Idle)
	ab.mu.Lock()
	ab.allDown = true
	ab.mu.Unlock()
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m001", Token: tok("s", 1, 2)}); codeOf(err) != record.CodeUnavailable {
		t.Fatalf("Create in a zone whose hosts are all declared down: %v, want Unavailable", err)
	}
	if m, _ := f.e.Get(ctx, "m001"); m.State != record.Speculative {
		t.Fatalf("the refused Create changed m001: %s", m.State)
	}
	if _, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: "m000", Token: tok("s", 1, 3)}); err != nil {
		t.Fatalf("Delete of a machine on a host declared down: %v, want accepted", err)
	}
	f.waitState("m000", record.Speculative)
}
