package placement

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/bigfleet/libvirt-provider/backend"
)

// A migration books its machine twice for a while: on its source host,
// where it runs (observed or reserved there, and where[] still names it),
// and on the destination as incoming. The incoming booking counts in the
// destination's books, so concurrent Creates and migrations never
// oversubscribe it, but it does not move where[]: until the migration
// succeeds the machine is on its source.
//
// Listings see the move differently from the planner, and the books must
// not follow them blindly (issue 38, "capacity after a migration"):
//   - while the move runs, a listing of the destination shows the copy in
//     passage (paused, incoming). It is the incoming booking, not a second
//     machine: it stays booked once, as incoming, and where[] stays on the
//     source, which FinishMove needs to find.
//   - a listing that began before the move ended shows the machine where
//     it was: still on the source, not yet on the destination. Landing
//     after FinishMove, it would book the machine back on the source and
//     off the destination until the next pass, and a Create in the room
//     the move freed would be refused meanwhile. So a listing carries the
//     zone's clock from when it began (ListingStarts), and what it says of
//     a machine whose move ended since is not taken.
// The move is kept until a listing of each of its hosts began after its
// end; then listings are the truth again, and a copy still on the source
// (a real duplicate, reconcile's to judge) is counted where it is.

// move is one migration of a machine between two hosts of a zone.
type move struct {
	from, to *hostState
	ended    uint64 // the zone's clock at its success; 0 while in flight
	// fromListed, toListed: a listing of that host began after the end.
	fromListed, toListed bool
}

// Listing is a host's listing, begun when ListingStarts handed it out.
type Listing struct {
	host string
	at   uint64
}

// ListingStarts is called before a host is listed; its Listing goes with
// the listing's result to ObserveListing.
func (p *Planner) ListingStarts(host string) Listing {
	l := Listing{host: host}
	p.withHost(host, func(z *zone, _ *hostState) { l.at = z.clock })
	return l
}

// booked is what a listing of h that began at l books on h: the listed
// machines less the copies in passage and the machines that moved off h
// after l began, plus those that moved onto h after it began.
func (z *zone) booked(h *hostState, l Listing, listed map[string]Size) map[string]Size {
	out := make(map[string]Size, len(listed))
	for id, s := range listed {
		mv := z.moves[id]
		switch {
		case mv == nil:
		case mv.ended == 0 && mv.to == h:
			continue // the copy in passage: booked once, as incoming
		case mv.ended > l.at && mv.from == h:
			continue // seen before it left
		}
		out[id] = s
	}
	for id, mv := range z.moves {
		switch {
		case mv.ended == 0:
		case mv.ended > l.at:
			if s, ok := h.observed[id]; ok && mv.to == h {
				out[id] = s // arrived after the listing began
			}
		case mv.from == h:
			mv.fromListed = true
		case mv.to == h:
			mv.toListed = true
		}
		if mv.fromListed && mv.toListed {
			delete(z.moves, id)
		}
	}
	return out
}

// ReserveMove picks a destination for machineID, now on host from, and
// books s there as incoming, in one step under the zone's mutex. to names
// the destination ("" lets the policy choose among the connected,
// uncordoned hosts other than from); a named host must exist in the zone
// (else backend.ErrUnknownHost), differ from from, and fit (else
// backend.ErrNoCapacity). A machine already moving keeps its destination.
func (p *Planner) ReserveMove(zoneName, machineID, from, to string, s Size) (Decision, error) {
	return p.ReserveMoveAmong(zoneName, machineID, from, to, s, nil)
}

// ReserveMoveAmong is ReserveMove with hosts ruled out: refused maps a
// host's name to why it cannot run this machine (its QEMU lacks the
// guest's machine type, say: a judgement about the machine, not the
// host's room, so the caller makes it). A refused host is never chosen;
// named, or when no other host is left, the error (wrapping
// backend.ErrNoCapacity) names each refused host and why.
func (p *Planner) ReserveMoveAmong(zoneName, machineID, from, to string, s Size, refused map[string]string) (Decision, error) {
	z := p.zone(zoneName)
	if z == nil {
		return Decision{}, fmt.Errorf("zone %q: %w", zoneName, backend.ErrUnknownZone)
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	var src *hostState
	for _, h := range z.hosts {
		if _, ok := h.incoming[machineID]; ok {
			return Decision{Host: h.Name}, nil
		}
		if h.Name == from {
			src = h
		}
	}
	if src == nil {
		return Decision{}, fmt.Errorf("zone %s: source host %q: %w", zoneName, from, backend.ErrUnknownHost)
	}
	var dst *hostState
	if to != "" {
		dst = z.named(to)
		switch {
		case dst == nil:
			return Decision{}, fmt.Errorf("zone %s has no host %q: %w", zoneName, to, backend.ErrUnknownHost)
		case dst == src:
			return Decision{}, fmt.Errorf("machine %s is already on host %s: %w", machineID, to, backend.ErrNoCapacity)
		case refused[to] != "":
			return Decision{}, fmt.Errorf("zone %s: host %s cannot run machine %s: %s: %w", zoneName, to, machineID, refused[to], backend.ErrNoCapacity)
		case !dst.fits(s):
			return Decision{}, z.hostRefuses(dst, s)
		}
	} else if dst, _ = z.pick(p.policy, s, func(h *hostState) bool { return h == src || refused[h.Name] != "" }); dst == nil {
		if len(refused) > 0 && !z.anyOther(src, refused) {
			return Decision{}, fmt.Errorf("zone %s: no host other than %s can run machine %s%s: %w", zoneName, from, machineID, refusals(refused), backend.ErrNoCapacity)
		}
		return Decision{}, fmt.Errorf("no other host than %s: %w%s", from, z.noCapacity(s), refusals(refused))
	}
	v, m := dst.free()
	if dst.incoming == nil {
		dst.incoming = map[string]Size{}
	}
	dst.incoming[machineID] = s
	dst.add(s, +1)
	z.fix(dst)
	z.moves[machineID] = &move{from: src, to: dst}
	why := p.why(dst, s, v, m, len(z.hosts))
	if to != "" {
		why = fmt.Sprintf("named: host %s fits (%d vCPU, %d MiB free after overcommit before this %d vCPU, %d MiB)",
			dst.Name, v, m, s.VCPUs, s.MemoryMiB)
	}
	return Decision{Host: dst.Name, Why: why}, nil
}

// FinishMove ends a migration booked by ReserveMove. ok: the machine now
// runs on to and is booked there alone (the source's booking is dropped);
// not ok: the incoming booking on to is dropped and the source keeps it.
func (p *Planner) FinishMove(zoneName, machineID, to string, ok bool) {
	z := p.zone(zoneName)
	if z == nil {
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	dst := z.named(to)
	if dst == nil {
		return
	}
	s, moving := dst.incoming[machineID]
	if moving {
		delete(dst.incoming, machineID)
		dst.add(s, -1)
	}
	mv := z.moves[machineID]
	if mv != nil && (mv.to != dst || mv.ended != 0) {
		mv = nil // not this move's end
	}
	if !ok {
		if mv != nil {
			delete(z.moves, machineID)
		}
		z.fix(dst)
		return
	}
	// The source is the move's, not where[]: a listing may have taken the
	// machine off the source's books already (its domain left) while the
	// move was still in flight.
	src := z.where[machineID]
	if mv != nil {
		src = mv.from
	}
	if src != nil && src != dst {
		src.drop(machineID)
		z.fix(src)
	}
	if _, seen := dst.observed[machineID]; !seen && moving {
		dst.observed[machineID] = s
		dst.add(s, +1)
	}
	z.where[machineID] = dst
	if mv != nil {
		z.clock++
		mv.ended = z.clock
	}
	z.fix(dst)
}

// named finds a host of the zone by name (a scan: zones hold at most a
// few thousand hosts, and a migration is rare).
func (z *zone) named(name string) *hostState {
	for _, h := range z.hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// hostRefuses explains why a named host cannot take s.
func (z *zone) hostRefuses(h *hostState, s Size) error {
	why := ""
	switch {
	case h.Down:
		why = "is declared down"
	case !h.Connected:
		why = "is not connected"
	case h.Cordoned:
		why = "is cordoned"
	case h.PoolKnown && h.PoolFreeBytes == 0:
		why = "has a full storage pool"
	case !h.hugePagesFit(s):
		why = fmt.Sprintf("has %d MiB of %d KiB huge pages free", h.HugePagesFreeKiB[s.HugePageKiB]>>10, s.HugePageKiB)
	default:
		v, m := h.free()
		why = fmt.Sprintf("has %d vCPU, %d MiB free after overcommit", max(v, 0), max(m, 0))
	}
	return fmt.Errorf("zone %s: host %s cannot take %d vCPU, %d MiB: it %s: %w",
		z.name, h.Name, s.VCPUs, s.MemoryMiB, why, backend.ErrNoCapacity)
}

// anyOther: a schedulable host other than src is not ruled out (so room,
// not the machine's needs, is what is missing).
func (z *zone) anyOther(src *hostState, refused map[string]string) bool {
	for _, h := range z.hosts {
		if h != src && h.schedulable() && refused[h.Name] == "" {
			return true
		}
	}
	return false
}

// refusals lists the hosts ReserveMoveAmong ruled out, for its error.
func refusals(refused map[string]string) string {
	if len(refused) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(" (ruled out:")
	for i, h := range slices.Sorted(maps.Keys(refused)) {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " host %s: %s", h, refused[h])
	}
	return b.String() + ")"
}
