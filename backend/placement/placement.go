// Package placement chooses a host of a zone for a new machine and keeps
// the books of each host: its size, what our machines there are sized to
// use (from inventory) and the reservations of Creates in flight. A
// decision and its reservation are taken together under the zone's mutex,
// so concurrent Creates never oversubscribe a host. It does no I/O: the
// backends feed it what they read from their hosts.
package placement

import (
	"fmt"
	"sync"
)

// Policy says which fitting host wins.
type Policy string

// Policies: spread puts a machine on the fitting host with the most free
// memory after overcommit (ties: fewest machines, then name); pack on the
// one with the least free memory that still fits.
const (
	Spread Policy = "spread"
	Pack   Policy = "pack"
)

// ParsePolicy reads --placement.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case Spread, Pack:
		return Policy(s), nil
	case "":
		return Spread, nil
	}
	return "", fmt.Errorf("--placement %q: want spread or pack", s)
}

// Size is what a machine is sized to use.
type Size struct {
	VCPUs     int
	MemoryMiB int64
	// HugePageKiB: the memory is backed by huge pages of this size (KiB),
	// which the host must have free (0: ordinary memory).
	HugePageKiB uint64
}

// Host is one hypervisor's static description and its latest readings.
type Host struct {
	Name string
	Zone string
	// Enforce: the host's size limits placement. False for --connect hosts,
	// whose capacity is shown but never refuses a Create.
	Enforce          bool
	VCPUs            int
	MemoryMiB        int64
	CPUOvercommit    float64 // ≤ 0 counts as 1
	MemoryOvercommit float64 // ≤ 0 counts as 1
	// PoolFreeBytes is the storage pool's free space; PoolKnown says it was
	// read (a full pool refuses placements, an unread one does not).
	PoolFreeBytes uint64
	PoolKnown     bool
	Connected     bool
	Cordoned      bool
	// Down: the operator declared the host down for sure; like a host
	// that is not connected, it takes nothing.
	Down bool
	// HugePagesFreeKiB is the host's free huge page memory by page size
	// (KiB), as last read; nil: not read. A size missing from a reading
	// has none free.
	HugePagesFreeKiB map[uint64]uint64
}

// Usage is a host's books: what our machines there use, reservations
// included.
type Usage struct {
	VCPUs     int
	MemoryMiB int64
	Machines  int
}

// hostState is a Host and its books. Guarded by its zone's mutex.
type hostState struct {
	Host
	observed map[string]Size // from the latest inventory of the host
	reserved map[string]Size // Creates in flight, not yet seen by inventory
	incoming map[string]Size // migrations in flight to this host (move.go)
	used     Usage           // sum of observed and reserved
	placed   orderKey        // the key the zone's order holds it under (order.go)
}

func (h *hostState) add(s Size, sign int) {
	h.used.VCPUs += sign * s.VCPUs
	h.used.MemoryMiB += int64(sign) * s.MemoryMiB
	h.used.Machines += sign
}

// ratio is an overcommit ratio, 1 when unset.
func ratio(r float64) float64 {
	if r <= 0 {
		return 1
	}
	return r
}

// free is what is left to place after overcommit (may be negative when
// inventory found more than the limits allow).
func (h *hostState) free() (vcpus int, memMiB int64) {
	return int(float64(h.VCPUs)*ratio(h.CPUOvercommit)) - h.used.VCPUs,
		int64(float64(h.MemoryMiB)*ratio(h.MemoryOvercommit)) - h.used.MemoryMiB
}

// schedulable: connected and not cordoned.
func (h *hostState) schedulable() bool { return h.Connected && !h.Cordoned && !h.Down }

// fits reports whether s fits on h now.
func (h *hostState) fits(s Size) bool {
	if !h.schedulable() {
		return false
	}
	if !h.hugePagesFit(s) {
		// Enforced on every host: QEMU cannot start the guest without them.
		return false
	}
	if !h.Enforce {
		return true
	}
	if h.PoolKnown && h.PoolFreeBytes == 0 {
		return false
	}
	v, m := h.free()
	return s.VCPUs <= v && s.MemoryMiB <= m
}

// hugePagesFit: s needs no huge pages, or the host's free pages of its
// size (last read) hold it on top of the reservations made since, which
// the reading may not show yet (a Create in flight, an incoming
// migration). An unread host is not refused: its Create then fails at
// start if the pages are missing.
func (h *hostState) hugePagesFit(s Size) bool {
	if s.HugePageKiB == 0 || h.HugePagesFreeKiB == nil {
		return true
	}
	var pending uint64
	for _, r := range []map[string]Size{h.reserved, h.incoming} {
		for _, o := range r {
			if o.HugePageKiB == s.HugePageKiB {
				pending += uint64(max(o.MemoryMiB, 0)) << 10
			}
		}
	}
	return pending+(uint64(max(s.MemoryMiB, 0))<<10) <= h.HugePagesFreeKiB[s.HugePageKiB]
}

// zone is the hosts of one zone and where each machine is booked.
type zone struct {
	name  string
	mu    sync.Mutex
	hosts []*hostState
	where map[string]*hostState // machine id → host holding its booking
	moves map[string]*move      // migrations in flight or whose end listings may not show yet (move.go)
	clock uint64                // counts ended moves; a Listing remembers it (move.go)
}

// Planner keeps every zone. Hosts are added at start and never removed.
type Planner struct {
	policy Policy
	mu     sync.RWMutex // guards zones and hostZone (the maps, not the zones)
	zones  map[string]*zone
	byHost map[string]*zone
}

// New returns an empty planner using policy ("" is spread).
func New(policy Policy) *Planner {
	if policy == "" {
		policy = Spread
	}
	return &Planner{policy: policy, zones: map[string]*zone{}, byHost: map[string]*zone{}}
}

// Policy is the planner's policy.
func (p *Planner) Policy() Policy { return p.policy }

// AddHost adds a host; a name already present is an error.
func (p *Planner) AddHost(h Host) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.byHost[h.Name]; ok {
		return fmt.Errorf("placement: host %q added twice", h.Name)
	}
	z := p.zones[h.Zone]
	if z == nil {
		z = &zone{name: h.Zone, where: map[string]*hostState{}, moves: map[string]*move{}}
		p.zones[h.Zone] = z
	}
	z.mu.Lock()
	z.insert(&hostState{Host: h, observed: map[string]Size{}, reserved: map[string]Size{}})
	z.mu.Unlock()
	p.byHost[h.Name] = z
	return nil
}

func (p *Planner) zone(name string) *zone {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.zones[name]
}

// withHost runs fn on the named host under its zone's mutex.
func (p *Planner) withHost(name string, fn func(z *zone, h *hostState)) bool {
	p.mu.RLock()
	z := p.byHost[name]
	p.mu.RUnlock()
	if z == nil {
		return false
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, h := range z.hosts {
		if h.Name == name {
			fn(z, h)
			z.fix(h)
			return true
		}
	}
	return false
}

// Update changes a host's description or readings (size, pool, connected,
// cordoned) with fn; its books are kept. It reports whether the host exists.
func (p *Planner) Update(name string, fn func(h *Host)) bool {
	return p.withHost(name, func(_ *zone, h *hostState) {
		zone := h.Zone
		fn(&h.Host)
		h.Name, h.Zone = name, zone // identity is fixed
	})
}

// ConnectedHook is the hook that tells the planner whether the named host
// can take machines (its connection's OnConnected): the host's link calls
// straight into placement, not back into the backend that set it up.
func (p *Planner) ConnectedHook(name string) func(up bool) {
	return func(up bool) { p.Update(name, func(h *Host) { h.Connected = up }) }
}

// Get returns a host's description and books.
func (p *Planner) Get(name string) (Host, Usage, bool) {
	var hh Host
	var u Usage
	ok := p.withHost(name, func(_ *zone, h *hostState) { hh, u = h.Host, h.used })
	return hh, u, ok
}

// Observe replaces a host's inventory with a listing taken now: the sizes
// of our machines found there. A reservation whose machine is now seen is
// dropped (the machine counts once, as observed).
func (p *Planner) Observe(name string, machines map[string]Size) bool {
	return p.ObserveListing(p.ListingStarts(name), machines)
}

// ObserveListing replaces a host's inventory with a listing that began at
// l. The books follow the migrations (move.go, booked): a copy in passage
// is not booked a second time, and a move that ended after l began is not
// undone by what the listing saw before it.
func (p *Planner) ObserveListing(l Listing, machines map[string]Size) bool {
	return p.withHost(l.host, func(z *zone, h *hostState) {
		machines = z.booked(h, l, machines)
		for id, s := range h.observed {
			h.add(s, -1)
			if z.where[id] == h {
				delete(z.where, id)
			}
		}
		h.observed = make(map[string]Size, len(machines))
		for id, s := range machines {
			if r, ok := h.reserved[id]; ok {
				h.add(r, -1)
				delete(h.reserved, id)
			}
			if other := z.where[id]; other != nil && other != h {
				// Reserved elsewhere (a stale reservation): the host
				// that has the machine wins. Observed elsewhere too (a
				// duplicate domain, until reconcile removes one): both
				// copies use their host, so both stay counted.
				if r, ok := other.reserved[id]; ok {
					other.add(r, -1)
					delete(other.reserved, id)
					z.fix(other)
				}
			}
			h.observed[id] = s
			h.add(s, +1)
			z.where[id] = h
		}
		// Reservations still pending keep their booking in where.
		for id := range h.reserved {
			z.where[id] = h
		}
	})
}

// drop removes a machine's booking (reserved or observed) from h.
func (h *hostState) drop(id string) {
	if s, ok := h.reserved[id]; ok {
		h.add(s, -1)
		delete(h.reserved, id)
	}
	if s, ok := h.observed[id]; ok {
		h.add(s, -1)
		delete(h.observed, id)
	}
}
