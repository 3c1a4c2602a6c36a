package placement

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bigfleet/libvirt-provider/backend"
)

// Decision is where a machine goes and why. Why is "" when no choice was
// made (the machine was already booked on Host).
type Decision struct {
	Host string
	Why  string
}

// Reserve picks a host of the zone for machineID and books s there, in one
// step under the zone's mutex. A machine already booked in the zone (a
// retried Create) keeps its host. No fitting host: an error wrapping
// backend.ErrNoCapacity naming the zone, the request and the best host's
// free capacity. An unknown zone wraps backend.ErrUnknownZone.
func (p *Planner) Reserve(zoneName, machineID string, s Size) (Decision, error) {
	z := p.zone(zoneName)
	if z == nil {
		return Decision{}, fmt.Errorf("zone %q: %w", zoneName, backend.ErrUnknownZone)
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if h := z.where[machineID]; h != nil {
		return Decision{Host: h.Name}, nil // no choice made: no reason
	}
	best, _ := z.pick(p.policy, s, nil)
	if best == nil {
		return Decision{}, z.refuse(s)
	}
	v, m := best.free() // before this booking, for the reason
	best.reserved[machineID] = s
	best.add(s, +1)
	z.fix(best)
	z.where[machineID] = best
	return Decision{Host: best.Name, Why: p.why(best, s, v, m, len(z.hosts))}, nil
}

// Pin books s for machineID on the named host of the zone, whatever its
// room, cordon or link: a Create resumed on the host its first attempt
// chose (where its domain may already be) must go back there, and a
// refusal would leave that domain behind. A machine already booked in the
// zone (seen there by a listing) keeps its host. An unknown host wraps
// backend.ErrUnknownHost.
func (p *Planner) Pin(zoneName, hostName, machineID string, s Size) (Decision, error) {
	z := p.zone(zoneName)
	if z == nil {
		return Decision{}, fmt.Errorf("zone %q: %w", zoneName, backend.ErrUnknownZone)
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if h := z.where[machineID]; h != nil {
		return Decision{Host: h.Name}, nil
	}
	h := z.named(hostName)
	if h == nil {
		return Decision{}, fmt.Errorf("zone %s has no host %q: %w", zoneName, hostName, backend.ErrUnknownHost)
	}
	h.reserved[machineID] = s
	h.add(s, +1)
	z.fix(h)
	z.where[machineID] = h
	return Decision{Host: h.Name}, nil
}

// why is the decision's reason, for the log and the machine's history,
// quoting the free capacity the decision saw.
func (p *Planner) why(h *hostState, s Size, freeV int, freeM int64, total int) string {
	if !h.Enforce {
		return fmt.Sprintf("%s: host %s of %d (capacity not enforced)", p.policy, h.Name, total)
	}
	what := "most"
	if p.policy == Pack {
		what = "least"
	}
	return fmt.Sprintf("%s: host %s has the %s free memory after overcommit of the zone's %d hosts (%d vCPU, %d MiB free before this %d vCPU, %d MiB)",
		p.policy, h.Name, what, total, freeV, freeM, s.VCPUs, s.MemoryMiB)
}

// refuse is Reserve's refusal. While a migration is in flight its machine
// is booked on both of its hosts, and the source's room comes back when
// it ends, a moment later. If that room would take s, the refusal is also
// transient, so the engine tries the Create again within its deadline
// rather than failing a slot the zone is about to have room for.
// Otherwise it is final.
func (z *zone) refuse(s Size) error {
	err := z.noCapacity(s)
	var freeing []string
	for id, mv := range z.moves {
		if mv.ended == 0 && mv.from.fitsWithout(s, mv.to.incoming[id]) {
			freeing = append(freeing, mv.from.Name)
		}
	}
	if len(freeing) == 0 {
		return err
	}
	slices.Sort(freeing)
	return fmt.Errorf("%w; a migration in flight off host %s gives back room that fits when it ends: %w",
		err, strings.Join(slices.Compact(freeing), ", "), backend.ErrTransient)
}

// fitsWithout reports whether s would fit on h once gone is no longer
// booked there.
func (h *hostState) fitsWithout(s, gone Size) bool {
	h.add(gone, -1)
	defer h.add(gone, +1)
	return h.fits(s)
}

// noCapacity explains a refusal: the request, the best schedulable host's
// free capacity, and how many hosts were cordoned or down.
func (z *zone) noCapacity(s Size) error {
	var best *hostState
	down, cordoned, full := 0, 0, 0
	for _, h := range z.hosts {
		switch {
		case !h.Connected || h.Down:
			down++
		case h.Cordoned:
			cordoned++
		default:
			if h.PoolKnown && h.PoolFreeBytes == 0 {
				full++
			}
			_, fm := h.free()
			if best == nil {
				best = h
			} else if _, bm := best.free(); fm > bm || (fm == bm && h.Name < best.Name) {
				best = h
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "zone %s: no host fits %d vCPU, %d MiB", z.name, s.VCPUs, s.MemoryMiB)
	if s.HugePageKiB > 0 {
		fmt.Fprintf(&b, " of %d KiB huge pages", s.HugePageKiB)
	}
	if best == nil {
		b.WriteString(": no connected, uncordoned host")
	} else {
		v, m := best.free()
		fmt.Fprintf(&b, "; best host %s has %d vCPU, %d MiB free after overcommit", best.Name, max(v, 0), max(m, 0))
		if best.PoolKnown && best.PoolFreeBytes == 0 {
			b.WriteString(" and a full storage pool")
		}
		if s.HugePageKiB > 0 && best.HugePagesFreeKiB != nil {
			fmt.Fprintf(&b, ", %d MiB of those huge pages", best.HugePagesFreeKiB[s.HugePageKiB]>>10)
		}
	}
	fmt.Fprintf(&b, " (%d hosts: %d down, %d cordoned", len(z.hosts), down, cordoned)
	if full > 0 {
		fmt.Fprintf(&b, ", %d with a full pool", full)
	}
	b.WriteString(")")
	return fmt.Errorf("%s: %w", b.String(), backend.ErrNoCapacity)
}

// Release drops a machine's reservation (its Create failed); an observed
// machine stays booked. Unknown machines are ignored.
func (p *Planner) Release(zoneName, machineID string) {
	z := p.zone(zoneName)
	if z == nil {
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	h := z.where[machineID]
	if h == nil {
		return
	}
	if s, ok := h.reserved[machineID]; ok {
		h.add(s, -1)
		delete(h.reserved, machineID)
		z.fix(h)
	}
	if _, ok := h.observed[machineID]; !ok {
		delete(z.where, machineID)
	}
}

// Forget drops every booking of a machine (it was deleted).
func (p *Planner) Forget(zoneName, machineID string) {
	z := p.zone(zoneName)
	if z == nil {
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if h := z.where[machineID]; h != nil {
		h.drop(machineID)
		z.fix(h)
		delete(z.where, machineID)
	}
	if mv := z.moves[machineID]; mv != nil && mv.ended != 0 {
		delete(z.moves, machineID) // a stale listing must not keep it booked on the destination
	}
}

// HostOf names the host a machine is booked on in the zone, if any.
func (p *Planner) HostOf(zoneName, machineID string) (string, bool) {
	z := p.zone(zoneName)
	if z == nil {
		return "", false
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if h := z.where[machineID]; h != nil {
		return h.Name, true
	}
	return "", false
}

// Book records a machine found on a named host (as one entry of an
// inventory would, without replacing the host's other machines): a
// restored fake VM, or a Create adopted where it already was.
func (p *Planner) Book(host, machineID string, s Size) bool {
	return p.withHost(host, func(z *zone, h *hostState) {
		if other := z.where[machineID]; other != nil {
			other.drop(machineID)
			if other != h {
				z.fix(other)
			}
		}
		h.observed[machineID] = s
		h.add(s, +1)
		z.where[machineID] = h
	})
}
