package placement

import "sort"

// The hosts of a zone are kept sorted by the spread order: most free
// memory after overcommit first, then fewest machines, then name. A
// decision then looks at the first few hosts instead of all of them, and
// a booking moves one host to its new place. This keeps the zone's mutex
// held for a microsecond or so, which is what bounds the p99 of a
// decision when many Creates queue on it.

// key is the sort key's free-memory part.
func (h *hostState) key() int64 {
	_, m := h.free()
	return m
}

// before reports whether a sorts before b in the spread order.
func before(a, b *hostState) bool {
	ka, kb := a.key(), b.key()
	if ka != kb {
		return ka > kb
	}
	if a.used.Machines != b.used.Machines {
		return a.used.Machines < b.used.Machines
	}
	return a.Name < b.Name
}

// insert places a new host in order.
func (z *zone) insert(h *hostState) {
	i := sort.Search(len(z.hosts), func(i int) bool { return before(h, z.hosts[i]) })
	z.hosts = append(z.hosts, nil)
	copy(z.hosts[i+1:], z.hosts[i:])
	z.hosts[i] = h
	z.renumber(i, len(z.hosts))
}

// fix moves h to its place after its key changed.
func (z *zone) fix(h *hostState) {
	i := h.pos
	switch {
	case i > 0 && before(h, z.hosts[i-1]):
		j := sort.Search(i, func(k int) bool { return before(h, z.hosts[k]) })
		copy(z.hosts[j+1:i+1], z.hosts[j:i])
		z.hosts[j] = h
		z.renumber(j, i+1)
	case i+1 < len(z.hosts) && before(z.hosts[i+1], h):
		rest := z.hosts[i+1:]
		j := i + sort.Search(len(rest), func(k int) bool { return before(h, rest[k]) })
		copy(z.hosts[i:j], z.hosts[i+1:j+1])
		z.hosts[j] = h
		z.renumber(i, j+1)
	}
}

func (z *zone) renumber(from, to int) {
	for k := from; k < to; k++ {
		z.hosts[k].pos = k
	}
}

// pick returns the host the policy chooses for s, and how many hosts it
// looked at (for the reason). Spread: the first fitting host in order.
// Pack: the fitting host with the least free memory, ties broken by the
// same order (fewest machines, then name). skip (the machine's current
// host, for a migration) never wins.
func (z *zone) pick(pol Policy, s Size, skip *hostState) (*hostState, int) {
	if pol != Pack {
		for i, h := range z.hosts {
			if h != skip && h.fits(s) {
				return h, i + 1
			}
		}
		return nil, len(z.hosts)
	}
	// Hosts after the last one with at least s.MemoryMiB free cannot fit
	// (unless not enforced, which ignores size: those are checked too).
	var best *hostState
	looked := 0
	for i := len(z.hosts) - 1; i >= 0; i-- {
		h := z.hosts[i]
		looked++
		if best != nil && h.key() != best.key() {
			break // the group of the least fitting free memory is done
		}
		if h != skip && h.fits(s) {
			best = h // earlier in order within the group wins
		}
	}
	return best, looked
}
