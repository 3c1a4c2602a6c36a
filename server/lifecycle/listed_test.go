package lifecycle

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// zoneAUnlisted fails zone-a's listing while down is set.
type zoneAUnlisted struct {
	*testBackend
	down atomic.Bool
}

func (b *zoneAUnlisted) Inventory(ctx context.Context) []backend.ZoneInventory {
	inv := b.testBackend.Inventory(ctx)
	if b.down.Load() {
		for i := range inv {
			if inv[i].Zone == "zone-a" {
				inv[i].Machines, inv[i].Err = nil, errors.New("host down")
			}
		}
	}
	return inv
}

// Issue 15 case 5 (the window after a lost state file): until a zone's
// host has been listed once since start, its machines' bindings and fence
// marks may be unknown, so a mutation that would change one of them gets
// Unavailable saying why (and changes nothing); reads work; other zones
// are served; once the zone is listed, the mutation goes through.
func TestMutationsWaitForFirstListing(t *testing.T) {
	old := listingWait
	listingWait = 200 * time.Millisecond
	t.Cleanup(func() { listingWait = old })
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	b := &zoneAUnlisted{testBackend: f.be}
	b.down.Store(true)
	f.wrap = b
	f.start(2) // m000 in zone-a, m001 in zone-b
	_, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000", Token: record.Token{ShardID: "s", Epoch: 4}})
	if codeOf(err) != record.CodeUnavailable || !strings.Contains(err.Error(), `zone "zone-a" has not been listed since the provider started`) {
		t.Fatalf("Create in the unlisted zone: %v", err)
	}
	if m, _ := f.e.Get(t.Context(), "m000"); m.State != record.Speculative {
		t.Fatalf("refused Create changed m000: %s", m.State)
	}
	if _, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m001"}); err != nil {
		t.Fatalf("Create in the listed zone: %v", err)
	}
	// The host answers now: the next mutation wakes reconcile and waits
	// for the listing instead of being refused (a host that connected
	// after start, as on a slow KVM probe).
	b.down.Store(false)
	// The refused token advanced the mark (the contract: a token that
	// passes advances it even if the operation then fails): the retry
	// carries a newer one.
	if _, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000", Token: record.Token{ShardID: "s", Epoch: 5}}); err != nil {
		t.Fatalf("Create once zone-a is listed: %v", err)
	}
	f.waitState("m000", record.Idle)
}
