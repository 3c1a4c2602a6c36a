package placement

import (
	"errors"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

// A host ruled out for the machine is passed over even when the policy
// would choose it (b has the most free memory), books nothing, and a
// refusal names it with the caller's reason.
func TestMoveAmongPassesOverRuledOutHosts(t *testing.T) {
	t.Parallel()
	for _, pol := range []Policy{Spread, Pack} {
		p := planner(t, pol, host("a", 4, 4096), host("b", 4, 8192), host("c", 4, 4096))
		p.Book("a", "m1", Size{VCPUs: 2, MemoryMiB: 1024})
		s := Size{VCPUs: 2, MemoryMiB: 1024}
		out := map[string]string{"b": "its QEMU does not support machine type pc-i440fx-10.0"}
		if pol == Pack {
			out = map[string]string{"c": "no CPU model"} // pack would choose c, the least free
		}
		d, err := p.ReserveMoveAmong("z", "m1", "a", "", s, out)
		if err != nil || out[d.Host] != "" || d.Host == "a" {
			t.Fatalf("%s: move = %+v, %v; want a host other than a and %v", pol, d, err, out)
		}
		p.FinishMove("z", "m1", d.Host, false)
	}
}

func TestMoveAmongNamesEveryRefusal(t *testing.T) {
	t.Parallel()
	p := planner(t, Spread, host("a", 4, 4096), host("b", 4, 8192), host("c", 4, 4096))
	p.Book("a", "m1", Size{VCPUs: 2, MemoryMiB: 1024})
	s := Size{VCPUs: 2, MemoryMiB: 1024}
	out := map[string]string{"b": "its QEMU does not support machine type pc-i440fx-10.0 (it offers pc-i440fx-7.2)", "c": "capabilities not read: down"}
	_, err := p.ReserveMoveAmong("z", "m1", "a", "b", s, out)
	if !errors.Is(err, backend.ErrNoCapacity) || !strings.Contains(err.Error(), "host b cannot run machine m1: its QEMU does not support machine type pc-i440fx-10.0 (it offers pc-i440fx-7.2)") {
		t.Errorf("named: %v", err)
	}
	_, err = p.ReserveMoveAmong("z", "m1", "a", "", s, out)
	if !errors.Is(err, backend.ErrNoCapacity) || err.Error() != "zone z: no host other than a can run machine m1 (ruled out: "+
		"host b: its QEMU does not support machine type pc-i440fx-10.0 (it offers pc-i440fx-7.2); host c: capabilities not read: down): "+
		backend.ErrNoCapacity.Error() {
		t.Errorf("all ruled out: %v", err)
	}
	// With a host left that is not ruled out but has no room, the room is
	// the refusal, and the ruled-out hosts are named too.
	big := Size{VCPUs: 2, MemoryMiB: 6000}
	_, err = p.ReserveMoveAmong("z", "m1", "a", "", big, map[string]string{"b": "its QEMU does not support machine type x"})
	if !errors.Is(err, backend.ErrNoCapacity) || !strings.Contains(err.Error(), "no host fits 2 vCPU, 6000 MiB") ||
		!strings.Contains(err.Error(), "(ruled out: host b: its QEMU does not support machine type x)") {
		t.Errorf("room and ruled out: %v", err)
	}
	for _, h := range []string{"b", "c"} {
		if u := usage(t, p, h); u.Machines != 0 || u.VCPUs != 0 {
			t.Errorf("a refused move booked %s: %+v", h, u)
		}
	}
	// Without refusals the same move goes to b (the policy's choice).
	if d, err := p.ReserveMoveAmong("z", "m1", "a", "", s, nil); err != nil || d.Host != "b" {
		t.Errorf("unrestricted: %+v, %v", d, err)
	}
}
