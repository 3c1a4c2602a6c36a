package placement

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

func host(name string, v int, m int64) Host {
	return Host{Name: name, Zone: "z", Enforce: true, VCPUs: v, MemoryMiB: m, Connected: true}
}

func planner(t *testing.T, p Policy, hosts ...Host) *Planner {
	t.Helper()
	pl := New(p)
	for _, h := range hosts {
		if err := pl.AddHost(h); err != nil {
			t.Fatal(err)
		}
	}
	return pl
}

func mustReserve(t *testing.T, p *Planner, id string, s Size) Decision {
	t.Helper()
	d, err := p.Reserve("z", id, s)
	if err != nil {
		t.Fatalf("reserve %s: %v", id, err)
	}
	return d
}

func TestSpreadAndPack(t *testing.T) {
	hosts := []Host{host("big", 16, 32768), host("small", 16, 8192)}
	sp := planner(t, Spread, hosts...)
	if d := mustReserve(t, sp, "m1", Size{VCPUs: 1, MemoryMiB: 1024}); d.Host != "big" || !strings.Contains(d.Why, "spread: host big has the most free memory") {
		t.Fatalf("spread = %+v", d)
	}
	pk := planner(t, Pack, hosts...)
	if d := mustReserve(t, pk, "m1", Size{VCPUs: 1, MemoryMiB: 1024}); d.Host != "small" || !strings.Contains(d.Why, "pack: host small has the least free memory") {
		t.Fatalf("pack = %+v", d)
	}
	// pack fills small until the next one no longer fits, then big.
	for i := 2; i <= 8; i++ {
		mustReserve(t, pk, fmt.Sprint("m", i), Size{VCPUs: 1, MemoryMiB: 1024})
	}
	if d := mustReserve(t, pk, "m9", Size{VCPUs: 1, MemoryMiB: 1024}); d.Host != "big" {
		t.Fatalf("pack after small is full = %+v", d)
	}
}

func TestSpreadTies(t *testing.T) {
	p := planner(t, Spread, host("b", 8, 8192), host("a", 8, 8192), host("c", 8, 8192))
	// Equal free memory: fewest machines, then name.
	if d := mustReserve(t, p, "m1", Size{VCPUs: 1, MemoryMiB: 0}); d.Host != "a" {
		t.Fatalf("first tie = %s, want a (name)", d.Host)
	}
	if d := mustReserve(t, p, "m2", Size{VCPUs: 1, MemoryMiB: 0}); d.Host != "b" {
		t.Fatalf("second tie = %s, want b (fewest machines)", d.Host)
	}
}

func TestOvercommit(t *testing.T) {
	h := host("h", 4, 4096)
	h.CPUOvercommit, h.MemoryOvercommit = 2, 1.5
	p := planner(t, Spread, h)
	for i := range 4 {
		mustReserve(t, p, fmt.Sprint("m", i), Size{VCPUs: 2, MemoryMiB: 1536})
	}
	// 8 vCPU placeable are used up; memory has 6144-6144 = 0 left.
	_, err := p.Reserve("z", "m5", Size{VCPUs: 1, MemoryMiB: 1})
	if !errors.Is(err, backend.ErrNoCapacity) {
		t.Fatalf("beyond overcommit: %v", err)
	}
	_, u, _ := p.Get("h")
	if u != (Usage{VCPUs: 8, MemoryMiB: 6144, Machines: 4}) {
		t.Fatalf("usage = %+v", u)
	}
}

func TestSkipsCordonedDownAndFullPool(t *testing.T) {
	down, cord, pool := host("down", 64, 65536), host("cord", 64, 65536), host("pool", 64, 65536)
	down.Connected = false
	cord.Cordoned = true
	pool.PoolKnown = true // PoolFreeBytes 0: full
	ok := host("ok", 2, 2048)
	p := planner(t, Spread, down, cord, pool, ok)
	if d := mustReserve(t, p, "m1", Size{VCPUs: 1, MemoryMiB: 1024}); d.Host != "ok" {
		t.Fatalf("placed on %s", d.Host)
	}
	_, err := p.Reserve("z", "m2", Size{VCPUs: 4, MemoryMiB: 4096})
	want := "zone z: no host fits 4 vCPU, 4096 MiB; best host pool has 64 vCPU, 65536 MiB free after overcommit and a full storage pool (4 hosts: 1 down, 1 cordoned, 1 with a full pool): " + backend.ErrNoCapacity.Error()
	if !errors.Is(err, backend.ErrNoCapacity) || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	// Uncordoning makes room; a host coming back too.
	p.Update("cord", func(h *Host) { h.Cordoned = false })
	if d := mustReserve(t, p, "m2", Size{VCPUs: 4, MemoryMiB: 4096}); d.Host != "cord" {
		t.Fatalf("after uncordon: %s", d.Host)
	}
}

func TestNoCapacityMessage(t *testing.T) {
	p := planner(t, Spread, host("a", 4, 4096), host("b", 4, 8192))
	mustReserve(t, p, "m1", Size{VCPUs: 4, MemoryMiB: 2048})
	_, err := p.Reserve("z", "m2", Size{VCPUs: 2, MemoryMiB: 8192})
	want := "zone z: no host fits 2 vCPU, 8192 MiB; best host b has 0 vCPU, 6144 MiB free after overcommit (2 hosts: 0 down, 0 cordoned)"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	q := planner(t, Spread, Host{Name: "x", Zone: "z", Enforce: true})
	_, err = q.Reserve("z", "m", Size{VCPUs: 1, MemoryMiB: 1})
	if err == nil || !strings.Contains(err.Error(), "no connected, uncordoned host (1 hosts: 1 down") {
		t.Fatalf("all down: %v", err)
	}
	if _, err := q.Reserve("nope", "m", Size{VCPUs: 1, MemoryMiB: 1}); !errors.Is(err, backend.ErrUnknownZone) {
		t.Fatalf("unknown zone: %v", err)
	}
}

func TestNotEnforcedNeverRefuses(t *testing.T) {
	h := host("c", 1, 1024)
	h.Enforce = false
	p := planner(t, Spread, h)
	for i := range 10 {
		if d := mustReserve(t, p, fmt.Sprint("m", i), Size{VCPUs: 8, MemoryMiB: 65536}); d.Host != "c" || !strings.Contains(d.Why, "not enforced") {
			t.Fatalf("decision %+v", d)
		}
	}
}

func TestReleaseObserveForget(t *testing.T) {
	p := planner(t, Spread, host("a", 8, 8192), host("b", 8, 4096))
	d := mustReserve(t, p, "m1", Size{VCPUs: 2, MemoryMiB: 2048})
	// A retried Create keeps its host and books nothing more.
	if d2 := mustReserve(t, p, "m1", Size{VCPUs: 2, MemoryMiB: 2048}); d2.Host != d.Host {
		t.Fatalf("retry moved the machine: %s → %s", d.Host, d2.Host)
	}
	usage := func(h string) Usage { _, u, _ := p.Get(h); return u }
	if u := usage("a"); u != (Usage{2, 2048, 1}) {
		t.Fatalf("after reserve: %+v", u)
	}
	// The inventory sees m1: it counts once, as observed.
	p.Observe("a", map[string]Size{"m1": {VCPUs: 2, MemoryMiB: 2048}, "other": {VCPUs: 1, MemoryMiB: 1024}})
	if u := usage("a"); u != (Usage{3, 3072, 2}) {
		t.Fatalf("after observe: %+v", u)
	}
	p.Release("z", "m1") // an observed machine stays booked
	if u := usage("a"); u != (Usage{3, 3072, 2}) {
		t.Fatalf("release of an observed machine changed usage: %+v", u)
	}
	p.Forget("z", "m1")
	if u := usage("a"); u != (Usage{1, 1024, 1}) {
		t.Fatalf("after forget: %+v", u)
	}
	mustReserve(t, p, "m2", Size{VCPUs: 1, MemoryMiB: 1024}) // spread → a (7 GiB free) over b (4 GiB)
	p.Release("z", "m2")
	if u := usage("a"); u != (Usage{1, 1024, 1}) {
		t.Fatalf("after release: %+v", u)
	}
	if h, ok := p.HostOf("z", "m2"); ok {
		t.Fatalf("released machine still booked on %s", h)
	}
	// A machine found on another host than its stale booking moves there.
	mustReserve(t, p, "m3", Size{VCPUs: 1, MemoryMiB: 1024})
	p.Observe("b", map[string]Size{"m3": {VCPUs: 1, MemoryMiB: 1024}})
	if h, _ := p.HostOf("z", "m3"); h != "b" || usage("a") != (Usage{1, 1024, 1}) {
		t.Fatalf("m3 on %s, a = %+v", h, usage("a"))
	}
	if err := p.AddHost(host("a", 1, 1)); err == nil {
		t.Fatal("a host added twice")
	}
}

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]Policy{"": Spread, "spread": Spread, "pack": Pack} {
		if got, err := ParsePolicy(in); err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParsePolicy("random"); err == nil || !strings.Contains(err.Error(), "--placement") {
		t.Errorf("ParsePolicy(random) = %v", err)
	}
}

// Pin books the named host even when it is full, cordoned or down (a
// resumed Create goes back where its domain may be); a machine a listing
// saw elsewhere keeps that host; an unknown host is refused.
func TestPinBooksTheNamedHost(t *testing.T) {
	p := New(Spread)
	for _, h := range []Host{
		{Name: "a", Zone: "z", Enforce: true, VCPUs: 1, MemoryMiB: 512, Connected: false, Cordoned: true},
		{Name: "b", Zone: "z", Enforce: true, VCPUs: 64, MemoryMiB: 1 << 20, Connected: true},
	} {
		if err := p.AddHost(h); err != nil {
			t.Fatal(err)
		}
	}
	big := Size{VCPUs: 8, MemoryMiB: 8192}
	d, err := p.Pin("z", "a", "m1", big)
	if err != nil || d.Host != "a" {
		t.Fatalf("Pin on a full, cordoned, down host: %+v %v", d, err)
	}
	if _, u, _ := p.Get("a"); u.VCPUs != 8 || u.Machines != 1 {
		t.Fatalf("host a books %+v after the pin", u)
	}
	if d, _ := p.Reserve("z", "m1", big); d.Host != "a" {
		t.Fatalf("a retried Reserve of the pinned machine went to %q", d.Host)
	}
	p.Observe("b", map[string]Size{"m2": big})
	if d, err := p.Pin("z", "a", "m2", big); err != nil || d.Host != "b" {
		t.Fatalf("Pin of a machine listed on b: %+v %v, want b", d, err)
	}
	if _, err := p.Pin("z", "nope", "m3", big); !errors.Is(err, backend.ErrUnknownHost) {
		t.Fatalf("Pin on an unknown host: %v", err)
	}
}
