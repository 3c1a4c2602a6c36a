package fake

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/bigfleet/libvirt-provider/backend"
)

// GuestAddresses is backend.GuestAddresser: a running VM has one address on
// eth0 in 198.51.100.0/24 (TEST-NET-2), derived from its machine id so it
// stays the same across calls.
func (b *Backend) GuestAddresses(_ context.Context, machineID string, pl backend.Placement) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.runningLocked(machineID, pl); err != nil {
		return nil, err
	}
	h := fnv.New32a()
	h.Write([]byte(machineID))
	return []string{fmt.Sprintf("eth0 198.51.100.%d/24", 1+h.Sum32()%254)}, nil
}
