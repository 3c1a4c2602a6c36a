package placement

import (
	"errors"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

// A machine backed by huge pages goes only where enough pages of its size
// are free, counting the reservations made since the reading; --connect
// hosts (not enforced) are held to it too.
func TestHugePagesFit(t *testing.T) {
	t.Parallel()
	const p2M = 2048
	none := host("none", 64, 65536)
	none.HugePagesFreeKiB = map[uint64]uint64{} // read: no huge pages at all
	some := host("some", 64, 65536)
	some.Enforce = false
	some.HugePagesFreeKiB = map[uint64]uint64{p2M: 3 << 20, 1 << 20: 8 << 20} // 3 GiB of 2M, 8 GiB of 1G
	p := planner(t, Spread, none, some)
	s := Size{VCPUs: 1, MemoryMiB: 1024, HugePageKiB: p2M}
	for _, id := range []string{"m1", "m2", "m3"} {
		if d := mustReserve(t, p, id, s); d.Host != "some" {
			t.Fatalf("%s placed on %s, the host without huge pages", id, d.Host)
		}
	}
	_, err := p.Reserve("z", "m4", s)
	if !errors.Is(err, backend.ErrNoCapacity) || !strings.Contains(err.Error(), "of 2048 KiB huge pages") {
		t.Fatalf("fourth 1 GiB machine on 3 GiB of pages: %v", err)
	}
	// Ordinary memory still fits, on the host with the most free memory.
	if _, err := p.Reserve("z", "plain", Size{VCPUs: 1, MemoryMiB: 1024}); err != nil {
		t.Fatal(err)
	}
	// A page size the host has none of does not fit; one it has does.
	if _, err := p.Reserve("z", "m5", Size{VCPUs: 1, MemoryMiB: 1024, HugePageKiB: 16 << 10}); !errors.Is(err, backend.ErrNoCapacity) {
		t.Fatalf("16M pages: %v", err)
	}
	if d := mustReserve(t, p, "g1", Size{VCPUs: 1, MemoryMiB: 4096, HugePageKiB: 1 << 20}); d.Host != "some" {
		t.Fatalf("1G pages on %s", d.Host)
	}
	// A migration to a named host without the pages names the shortfall.
	if _, err := p.ReserveMove("z", "m1", "some", "none", s); err == nil || !strings.Contains(err.Error(), "has 0 MiB of 2048 KiB huge pages free") {
		t.Fatalf("move to none: %v", err)
	}
	// A host whose pages were never read is not refused.
	unread := planner(t, Spread, host("u", 4, 4096))
	mustReserve(t, unread, "m1", s)
}
