package lifecycle

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
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
	_, err := f.e.Drain(ctx, DrainRequest{MachineID: "m000", Token: tok("s1", 3, 1)})
	if codeOf(err) != CodeUnavailable || !strings.Contains(err.Error(), "not every host of zone") {
		t.Fatalf("stale token while h2 is down: %v, want Unavailable naming the zone's hosts", err)
	}
	if took := time.Since(t0); took > time.Second {
		t.Fatalf("refused after %s: h2 is down, no listing can come, so no wait", took)
	}
	if _, seen := f.e.marks.Get(MarkKey{ShardID: "s1", MachineID: "m000"}); seen {
		t.Fatal("the refused mutation recorded its mark")
	}
	if _, err := f.e.Create(ctx, CreateRequest{MachineID: "m000"}); codeOf(err) != CodeUnavailable {
		t.Fatalf("Create of a machine whose host is down: %v, want Unavailable (its domain may be there)", err)
	}
	hb.setUp()
	f.e.Reconcile(ctx)
	if m := f.waitState("m000", Configured); m.HostName != "h2" {
		t.Fatalf("adopted on %q", m.HostName)
	}
	if _, err := f.e.Drain(ctx, DrainRequest{MachineID: "m000", Token: tok("s1", 3, 1)}); codeOf(err) != CodeFenced {
		t.Fatalf("stale token after h2 was listed: %v, want FailedPrecondition", err)
	}
}
