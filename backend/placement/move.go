package placement

import (
	"fmt"

	"github.com/bigfleet/libvirt-provider/backend"
)

// A migration books its machine twice for a while: on its source host,
// where it runs (observed or reserved there, and where[] still names it),
// and on the destination as incoming. The incoming booking counts in the
// destination's books, so concurrent Creates and migrations never
// oversubscribe it, but it does not move where[]: until the migration
// succeeds the machine is on its source.

// ReserveMove picks a destination for machineID, now on host from, and
// books s there as incoming, in one step under the zone's mutex. to names
// the destination ("" lets the policy choose among the connected,
// uncordoned hosts other than from); a named host must exist in the zone
// (else backend.ErrUnknownHost), differ from from, and fit (else
// backend.ErrNoCapacity). A machine already moving keeps its destination.
func (p *Planner) ReserveMove(zoneName, machineID, from, to string, s Size) (Decision, error) {
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
		case !dst.fits(s):
			return Decision{}, z.hostRefuses(dst, s)
		}
	} else if dst, _ = z.pick(p.policy, s, src); dst == nil {
		return Decision{}, fmt.Errorf("no other host than %s: %w", from, z.noCapacity(s))
	}
	v, m := dst.free()
	if dst.incoming == nil {
		dst.incoming = map[string]Size{}
	}
	dst.incoming[machineID] = s
	dst.add(s, +1)
	z.fix(dst)
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
	if ok {
		if src := z.where[machineID]; src != nil && src != dst {
			src.drop(machineID)
			z.fix(src)
		}
		if _, seen := dst.observed[machineID]; !seen && moving {
			dst.observed[machineID] = s
			dst.add(s, +1)
		}
		z.where[machineID] = dst
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
