package placement

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

// checkLimits fails when any host's books exceed its placeable capacity,
// or disagree with the sum of its bookings.
func checkLimits(t *testing.T, p *Planner) {
	t.Helper()
	for _, z := range p.zones {
		z.mu.Lock()
		for i, h := range z.hosts {
			if i > 0 && before(h, z.hosts[i-1]) {
				t.Errorf("zone %s: host %s at %d out of order", z.name, h.Name, i)
			}
			if h.placed != h.orderKey() { // its index would be searched under a stale key
				t.Errorf("zone %s: host %s sorted under %+v, its books say %+v", z.name, h.Name, h.placed, h.orderKey())
			}
			var sum Usage
			for _, m := range []map[string]Size{h.observed, h.reserved} {
				for _, s := range m {
					sum.VCPUs += s.VCPUs
					sum.MemoryMiB += s.MemoryMiB
					sum.Machines++
				}
			}
			if sum != h.used {
				t.Errorf("host %s: books %+v, bookings sum to %+v", h.Name, h.used, sum)
			}
			v, m := h.free()
			if v < 0 || m < 0 {
				t.Errorf("host %s oversubscribed: %+v of %d vCPU × %v, %d MiB × %v",
					h.Name, h.used, h.VCPUs, h.CPUOvercommit, h.MemoryMiB, h.MemoryOvercommit)
			}
		}
		z.mu.Unlock()
	}
}

// TestNeverOversubscribed: many goroutines reserve, release, forget and
// observe at random, with cordons and outages flipping; no host ever
// holds more than its placeable capacity, the books always equal the sum
// of the bookings, and a refusal happens only when no host had room.
// Run with -race.
func TestNeverOversubscribed(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			p := New([]Policy{Spread, Pack}[seed%2])
			for i := range 6 {
				h := Host{Name: fmt.Sprint("h", i), Zone: "z", Enforce: true, VCPUs: 4 + i, MemoryMiB: int64(2048 * (i + 1)),
					CPUOvercommit: 1 + float64(i%3), MemoryOvercommit: 1 + float64(i%2)/2, Connected: true}
				if err := p.AddHost(h); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(seed, uint64(g)))
					mine := map[string]bool{}
					for i := range 400 {
						id := fmt.Sprintf("g%d-m%d", g, r.IntN(40))
						switch k := r.IntN(10); {
						case k < 5:
							s := Size{VCPUs: 1 + r.IntN(4), MemoryMiB: int64(256 * (1 + r.IntN(8)))}
							if _, err := p.Reserve("z", id, s); err == nil {
								mine[id] = true
							} else if !errors.Is(err, backend.ErrNoCapacity) {
								t.Errorf("reserve: %v", err)
							}
						case k < 7:
							p.Release("z", id)
						case k < 8:
							p.Forget("z", id)
						case k < 9:
							h := fmt.Sprint("h", r.IntN(6))
							p.Update(h, func(x *Host) { x.Cordoned = r.IntN(3) == 0; x.Connected = r.IntN(4) != 0 })
						default:
							if i%50 == 0 {
								checkLimitsLocked(t, p)
							}
						}
					}
				}()
			}
			wg.Wait()
			checkLimits(t, p)
		})
	}
}

// checkLimitsLocked is checkLimits taken under the planner's map lock, so
// it can run while other goroutines work.
func checkLimitsLocked(t *testing.T, p *Planner) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	checkLimits(t, p)
}

// TestRefusalOnlyWhenFull: a sequential model check: Reserve refuses only
// when no schedulable host has room for the request, and always books it
// on a host that had.
func TestRefusalOnlyWhenFull(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	p := New(Spread)
	for i := range 4 {
		_ = p.AddHost(Host{Name: fmt.Sprint("h", i), Zone: "z", Enforce: true, VCPUs: 8, MemoryMiB: 8192, Connected: true, Cordoned: i == 3})
	}
	for i := range 500 {
		s := Size{VCPUs: 1 + r.IntN(3), MemoryMiB: int64(512 * (1 + r.IntN(4)))}
		room := false
		for h := range 3 {
			hh, u, _ := p.Get(fmt.Sprint("h", h))
			if u.VCPUs+s.VCPUs <= hh.VCPUs && u.MemoryMiB+s.MemoryMiB <= hh.MemoryMiB {
				room = true
			}
		}
		id := fmt.Sprint("m", i)
		d, err := p.Reserve("z", id, s)
		switch {
		case err != nil && room:
			t.Fatalf("refused %+v while a host had room: %v", s, err)
		case err == nil && !room:
			t.Fatalf("booked %+v on %s with no room anywhere", s, d.Host)
		case err == nil && d.Host == "h3":
			t.Fatal("booked on the cordoned host")
		}
		if r.IntN(3) == 0 {
			p.Release("z", fmt.Sprint("m", r.IntN(i+1)))
		}
	}
	checkLimits(t, p)
}
