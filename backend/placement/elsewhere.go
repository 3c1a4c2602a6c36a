package placement

// Elsewhere names, for a host of a zone, the machines the zone books on
// another host that nothing brings to this one: not booked here (a
// Create's reservation or a listing), and no migration in flight to it.
// Volumes of such a machine on this host, with no domain there, are what
// a migration cut by a crash or a dropped host left (issue 38): the
// backend may delete them. machine → its host.
func (p *Planner) Elsewhere(zoneName, hostName string) map[string]string {
	z := p.zone(zoneName)
	if z == nil {
		return nil
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	out := map[string]string{}
	for id, h := range z.where {
		if h.Name != hostName && !z.comingTo(id, hostName) {
			out[id] = h.Name
		}
	}
	return out
}

// NotHere reports whether nothing books machineID on hostName: it is not
// booked there and no migration of it is in flight there.
func (p *Planner) NotHere(zoneName, hostName, machineID string) bool {
	z := p.zone(zoneName)
	if z == nil {
		return false
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if h := z.where[machineID]; h != nil && h.Name == hostName {
		return false
	}
	return !z.comingTo(machineID, hostName)
}

// comingTo: a migration of id to host is in flight, or a booking of it
// there is pending (z.mu held).
func (z *zone) comingTo(id, host string) bool {
	if m := z.moves[id]; m != nil && m.ended == 0 && m.to.Name == host {
		return true
	}
	for _, h := range z.hosts {
		if h.Name != host {
			continue
		}
		_, reserved := h.reserved[id]
		_, incoming := h.incoming[id]
		return reserved || incoming
	}
	return false
}
