package placement

import (
	"errors"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

func usage(t *testing.T, p *Planner, name string) Usage {
	t.Helper()
	_, u, ok := p.Get(name)
	if !ok {
		t.Fatalf("no host %s", name)
	}
	return u
}

// A migration books the destination while the source keeps its booking;
// success moves the booking, failure drops the destination's.
func TestMoveBooksBothUntilFinished(t *testing.T) {
	t.Parallel()
	p := planner(t, Spread, host("a", 4, 4096), host("b", 4, 4096), host("c", 4, 2048))
	p.Book("a", "m1", Size{VCPUs: 2, MemoryMiB: 1024})
	d, err := p.ReserveMove("z", "m1", "a", "", Size{VCPUs: 2, MemoryMiB: 1024})
	if err != nil || d.Host != "b" || !strings.HasPrefix(d.Why, "spread: host b") {
		t.Fatalf("move = %+v, %v (want b: most free memory, never the source)", d, err)
	}
	if ua, ub := usage(t, p, "a"), usage(t, p, "b"); ua.VCPUs != 2 || ub.VCPUs != 2 || ub.MemoryMiB != 1024 {
		t.Fatalf("during: a %+v b %+v", ua, ub)
	}
	if h, _ := p.HostOf("z", "m1"); h != "a" {
		t.Fatalf("during the move the machine is on %s, want a", h)
	}
	// A retry keeps the destination.
	if d2, err := p.ReserveMove("z", "m1", "a", "", Size{VCPUs: 2, MemoryMiB: 1024}); err != nil || d2.Host != "b" {
		t.Fatalf("retry = %+v, %v", d2, err)
	}
	p.FinishMove("z", "m1", "b", true)
	if ua, ub := usage(t, p, "a"), usage(t, p, "b"); ua.Machines != 0 || ub.Machines != 1 || ub.VCPUs != 2 {
		t.Fatalf("after success: a %+v b %+v", ua, ub)
	}
	if h, _ := p.HostOf("z", "m1"); h != "b" {
		t.Fatalf("after the move the machine is on %s, want b", h)
	}
	// A failed move back to a leaves the books as they were.
	if _, err := p.ReserveMove("z", "m1", "b", "a", Size{VCPUs: 2, MemoryMiB: 1024}); err != nil {
		t.Fatal(err)
	}
	p.FinishMove("z", "m1", "a", false)
	if ua, ub := usage(t, p, "a"), usage(t, p, "b"); ua.Machines != 0 || ua.VCPUs != 0 || ub.Machines != 1 {
		t.Fatalf("after failure: a %+v b %+v", ua, ub)
	}
}

func TestMoveNamedHostMustFit(t *testing.T) {
	t.Parallel()
	p := planner(t, Spread, host("a", 4, 4096), host("b", 1, 4096), host("c", 4, 4096))
	p.Book("a", "m1", Size{VCPUs: 2, MemoryMiB: 1024})
	p.Update("c", func(h *Host) { h.Cordoned = true })
	for _, tc := range []struct {
		to   string
		want error
		msg  string
	}{
		{"nope", backend.ErrUnknownHost, "no host"},
		{"a", backend.ErrNoCapacity, "already on host a"},
		{"b", backend.ErrNoCapacity, "host b cannot take 2 vCPU, 1024 MiB: it has 1 vCPU"},
		{"c", backend.ErrNoCapacity, "is cordoned"},
	} {
		_, err := p.ReserveMove("z", "m1", "a", tc.to, Size{VCPUs: 2, MemoryMiB: 1024})
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("to %s: %v, want %v containing %q", tc.to, err, tc.want, tc.msg)
		}
	}
	// Nothing fits anywhere but the source: the zone's refusal, saying so.
	_, err := p.ReserveMove("z", "m1", "a", "", Size{VCPUs: 2, MemoryMiB: 1024})
	if !errors.Is(err, backend.ErrNoCapacity) || !strings.Contains(err.Error(), "no other host than a") {
		t.Fatalf("no destination: %v", err)
	}
	if ub, uc := usage(t, p, "b"), usage(t, p, "c"); ub.Machines+uc.Machines != 0 {
		t.Fatalf("a refused move booked something: b %+v c %+v", ub, uc)
	}
}
