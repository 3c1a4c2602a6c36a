package placement

import (
	"errors"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

var one = Size{VCPUs: 1, MemoryMiB: 256}

// books is each host's vCPUs in use.
func books(t *testing.T, p *Planner) map[string]int {
	t.Helper()
	return map[string]int{"sys": usage(t, p, "sys").VCPUs, "ses": usage(t, p, "ses").VCPUs}
}

// demoZone is make demo-pool's zone before its migration: two hosts of 2
// vCPUs, sys holding a and m, ses holding b.
func demoZone(t *testing.T) *Planner {
	t.Helper()
	p := planner(t, Spread, host("sys", 2, 4096), host("ses", 2, 4096))
	p.Observe("sys", map[string]Size{"a": one, "m": one})
	p.Observe("ses", map[string]Size{"b": one})
	return p
}

// A listing taken while m migrates shows it on both hosts: running on the
// source, paused on the destination (the copy in passage, booked there as
// incoming). m is booked once on each side of the move, whatever order
// the hosts' listings land in, and once it ends the source has its room
// back: the Create that follows fits there. On main the destination's
// listing turned the incoming booking into an observed one and moved the
// machine's host to it, so FinishMove found no source to drop and sys kept
// m ("no host fits 1 vCPU; best host ses has 0 vCPU").
func TestMoveListingDuringPassageBooksOnce(t *testing.T) {
	t.Parallel()
	for _, order := range [][]string{{"sys", "ses"}, {"ses", "sys"}} {
		t.Run(order[0]+"_first", func(t *testing.T) {
			p := demoZone(t)
			if _, err := p.ReserveMove("z", "m", "sys", "ses", one); err != nil {
				t.Fatal(err)
			}
			listed := map[string]map[string]Size{"sys": {"a": one, "m": one}, "ses": {"b": one, "m": one}}
			for _, h := range order {
				p.Observe(h, listed[h])
			}
			if got := books(t, p); got["sys"] != 2 || got["ses"] != 2 {
				t.Fatalf("during the move: %v, want sys 2 (a, m) and ses 2 (b, m incoming)", got)
			}
			if h, _ := p.HostOf("z", "m"); h != "sys" {
				t.Fatalf("during the move m is on %q, want sys (its copy there runs)", h)
			}
			p.FinishMove("z", "m", "ses", true)
			if got := books(t, p); got["sys"] != 1 || got["ses"] != 2 {
				t.Fatalf("after the move: %v, want sys 1, ses 2", got)
			}
			if d, err := p.Reserve("z", "n", one); err != nil || d.Host != "sys" {
				t.Fatalf("Create after the move: %+v, %v; want the room it left on sys", d, err)
			}
		})
	}
}

// A listing of the source that began before the move ended still shows
// the machine there; landing after FinishMove, it must not book it back on
// the source. A listing of the destination that began before the domain
// arrived does not show it; it must not unbook it there either.
func TestMoveStaleListingsKeepTheMove(t *testing.T) {
	t.Parallel()
	p := demoZone(t)
	if _, err := p.ReserveMove("z", "m", "sys", "ses", one); err != nil {
		t.Fatal(err)
	}
	lsys, lses := p.ListingStarts("sys"), p.ListingStarts("ses")
	p.FinishMove("z", "m", "ses", true)
	p.ObserveListing(lsys, map[string]Size{"a": one, "m": one})
	p.ObserveListing(lses, map[string]Size{"b": one})
	if got := books(t, p); got["sys"] != 1 || got["ses"] != 2 {
		t.Fatalf("after stale listings: %v, want sys 1 (a), ses 2 (b, m)", got)
	}
	if h, _ := p.HostOf("z", "m"); h != "ses" {
		t.Fatalf("m is on %q after stale listings, want ses", h)
	}
	if d, err := p.Reserve("z", "n", one); err != nil || d.Host != "sys" {
		t.Fatalf("Create after the move: %+v, %v", d, err)
	}
	// Listings begun after the end are the truth again: m gone from sys,
	// and a copy still there (a real duplicate) uses sys and is counted.
	p.Forget("z", "n")
	p.Observe("ses", map[string]Size{"b": one, "m": one})
	p.Observe("sys", map[string]Size{"a": one, "m": one})
	if got := books(t, p); got["sys"] != 2 || got["ses"] != 2 {
		t.Fatalf("a fresh listing showing a copy left on sys: %v, want it counted (sys 2, ses 2)", got)
	}
}

// A failed move whose copy in passage a listing saw leaves the books as
// they were before it: the destination's booking goes, the source keeps m.
func TestMoveFailedAfterPassageListed(t *testing.T) {
	t.Parallel()
	p := demoZone(t)
	if _, err := p.ReserveMove("z", "m", "sys", "ses", one); err != nil {
		t.Fatal(err)
	}
	p.Observe("ses", map[string]Size{"b": one, "m": one})
	p.FinishMove("z", "m", "ses", false)
	if got := books(t, p); got["sys"] != 2 || got["ses"] != 1 {
		t.Fatalf("after a failed move: %v, want sys 2, ses 1", got)
	}
	if h, _ := p.HostOf("z", "m"); h != "sys" {
		t.Fatalf("m is on %q after a failed move, want sys", h)
	}
	if _, err := p.Reserve("z", "n", Size{VCPUs: 2, MemoryMiB: 256}); !errors.Is(err, backend.ErrNoCapacity) {
		t.Fatalf("2 vCPU fit a zone with 1 free on each host: %v", err)
	}
}

// A Create that finds no room while a move is in flight is not failed for
// good: the move gives back its source's room when it ends, so the
// refusal is transient (the engine tries again within the Create's
// deadline) and says why. Once no move is in flight the refusal is final.
func TestNoRoomDuringMoveIsTransient(t *testing.T) {
	t.Parallel()
	p := demoZone(t)
	if _, err := p.ReserveMove("z", "m", "sys", "ses", one); err != nil { // m booked on both: the zone is full
		t.Fatal(err)
	}
	_, err := p.Reserve("z", "n", one)
	if !errors.Is(err, backend.ErrNoCapacity) || !backend.IsTransient(err) ||
		!strings.Contains(err.Error(), "a migration in flight off host sys gives back room") {
		t.Fatalf("no room during a move: %v, want a transient ErrNoCapacity naming the move", err)
	}
	p.FinishMove("z", "m", "ses", true)
	if d, err := p.Reserve("z", "n", one); err != nil || d.Host != "sys" {
		t.Fatalf("after the move: %+v, %v", d, err)
	}
	_, err = p.Reserve("z", "o", one)
	if !errors.Is(err, backend.ErrNoCapacity) || backend.IsTransient(err) {
		t.Fatalf("a full zone with no move in flight: %v, want a final ErrNoCapacity", err)
	}
	// A move whose source would still not fit the request: final at once.
	p.Forget("z", "n")
	if _, err := p.ReserveMove("z", "m", "ses", "sys", one); err != nil {
		t.Fatal(err)
	}
	_, err = p.Reserve("z", "big", Size{VCPUs: 3, MemoryMiB: 256})
	if !errors.Is(err, backend.ErrNoCapacity) || backend.IsTransient(err) {
		t.Fatalf("3 vCPU on hosts of 2 during a move: %v, want a final ErrNoCapacity", err)
	}
}
