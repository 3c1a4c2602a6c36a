package fake

import (
	"context"
	"sync"

	"github.com/bigfleet/libvirt-provider/backend"
)

var _ backend.ZoneStreamer = (*Backend)(nil)

// InventoryEach lists the zones concurrently, at most concurrency at a
// time (≤ 0: all at once), and hands each zone's listing to fn as soon as
// it is done, one fn call at a time. Each zone waits out its own
// inventory delay, hang or injected failure (SetFailure(OpInventory,
// zone, …) fails that zone only), so a test can hold one zone's listing
// while another's is reconciled.
func (b *Backend) InventoryEach(ctx context.Context, concurrency int, fn func(backend.ZoneInventory)) {
	zones := b.Zones()
	if concurrency <= 0 || concurrency > len(zones) {
		concurrency = len(zones)
	}
	sem := make(chan struct{}, concurrency)
	var fnMu sync.Mutex // fn calls never overlap
	var wg sync.WaitGroup
	for _, z := range zones {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			inv := b.inventoryZone(ctx, z)
			fnMu.Lock()
			defer fnMu.Unlock()
			fn(inv)
		})
	}
	wg.Wait()
}

// inventoryZone is one zone's share of Inventory.
func (b *Backend) inventoryZone(ctx context.Context, zone string) backend.ZoneInventory {
	inv := backend.ZoneInventory{Zone: zone}
	if inv.Err = b.begin(ctx, OpInventory, zone); inv.Err == nil {
		inv.Machines, inv.Err = b.listZone(zone)
	}
	return inv
}
