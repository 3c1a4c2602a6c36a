package lifecycle

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// Mutations wait for a zone's first listing since start. Until reconcile
// has listed a zone's host once, the engine may not know its machines'
// bindings and fence marks (a lost state file is rebuilt from the hosts,
// marks included): a stale token would pass the fence and a Create could
// adopt a bound domain as IDLE. So a mutation that would change a machine
// of such a zone gets Unavailable and wakes reconcile. Reconcile marks
// each zone listed as soon as its own listing is reconciled (pass.go), and
// serve waits (bounded) only for the zones whose hosts are ready, so it
// bites for a host that was down, or still connecting, at start: a
// mutation there waits for the listing while the host's first connection
// attempt runs (awaitListing), and is refused at once if the host is down.
//
// In a zone of several hosts a listing may cover only some of them
// (backend.ZoneInventory.Hosts and Unlisted): the machines of a host not
// listed since start are judged per host. A machine whose recorded host
// has been listed, or any machine once every host of its zone has been,
// may change; one whose host has not (or with no recorded host, as after
// a lost state file, while any host of its zone has not) waits for it like
// a zone not listed: its fence marks are on that host.
type listedZones struct {
	mu      sync.Mutex
	zones   map[string]bool
	hosts   map[string]map[string]bool // zone → hosts listed since start
	pending map[string]map[string]bool // zone → hosts never listed since start that the latest listing missed
	changed chan struct{}              // closed (and replaced) when a zone or host is newly listed
	first   chan struct{}              // closed after the first reconcile pass
	once    sync.Once
	kick    chan struct{} // wakes the reconcile loop
}

func newListedZones() *listedZones {
	return &listedZones{zones: map[string]bool{}, hosts: map[string]map[string]bool{}, pending: map[string]map[string]bool{},
		changed: make(chan struct{}), first: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// mark records a listing of zone covering hosts and missing unlisted.
func (l *listedZones) mark(zone string, hosts, unlisted []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	news := !l.zones[zone]
	l.zones[zone] = true
	if l.hosts[zone] == nil {
		l.hosts[zone] = map[string]bool{}
	}
	for _, h := range hosts {
		news = news || !l.hosts[zone][h]
		l.hosts[zone][h] = true
	}
	pending := map[string]bool{}
	for _, h := range unlisted {
		if !l.hosts[zone][h] {
			pending[h] = true
		}
	}
	l.pending[zone] = pending
	if news {
		close(l.changed)
		l.changed = make(chan struct{})
	}
}

// covers reports whether a machine of zone recorded on host ("" when not
// known) may change: its zone was listed, and its host too, or every
// host of the zone.
func (l *listedZones) covers(zone, host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.coversLocked(zone, host)
}

// withoutHost reports whether zone was listed but not the machine's host
// (one lock: every mutation asks).
func (l *listedZones) withoutHost(zone, host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.zones[zone] && !l.coversLocked(zone, host)
}

func (l *listedZones) coversLocked(zone, host string) bool {
	return l.zones[zone] && (len(l.pending[zone]) == 0 || (host != "" && l.hosts[zone][host]))
}

// missing names the hosts of zone never listed since start that the
// latest listing missed.
func (l *listedZones) missing(zone string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for h := range l.pending[zone] {
		out = append(out, h)
	}
	return out
}

// await waits until zone is listed or ctx ends.
func (l *listedZones) await(ctx context.Context, zone string) bool {
	return l.awaitCovers(ctx, zone, "", false)
}

// awaitCovers waits until zone is listed (perHost: and covers host) or
// ctx ends.
func (l *listedZones) awaitCovers(ctx context.Context, zone, host string, perHost bool) bool {
	for {
		l.mu.Lock()
		ok, ch := l.zones[zone], l.changed
		if perHost {
			ok = l.coversLocked(zone, host)
		}
		l.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

func (l *listedZones) has(zone string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.zones[zone]
}

// passed records that a reconcile pass completed.
func (l *listedZones) passed() { l.once.Do(func() { close(l.first) }) }

// wake asks for a reconcile pass soon (never blocks).
func (l *listedZones) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// WaitFirstReconcile blocks until the first reconcile pass since Start
// has completed or ctx ends, and reports whether it completed.
func (e *Engine) WaitFirstReconcile(ctx context.Context) bool {
	select {
	case <-e.listed.first:
		return true
	case <-ctx.Done():
		return false
	}
}

// listingWait bounds how long a mutation waits (holding no lock) for its
// zone's first listing: a host that connected after start is listed by
// the reconcile the mutation wakes, within its inventory timeout.
var listingWait = 20 * time.Second

// awaitListing lets a mutation of a machine whose zone has not been listed
// yet wake reconcile and wait for it, before it takes the machine's lock
// (reconcile takes it too). A zone whose host is still on its first
// connection attempt (backend.ErrHostConnecting) is waited for too; one
// whose host is down is not. notListed still refuses if the wait ran out.
func (e *Engine) awaitListing(ctx context.Context, id string) {
	m, ok := e.idx.Get(id)
	if !ok || e.listed.covers(m.Zone, m.HostName) {
		return
	}
	if zr := e.can.ZoneReadiness; zr != nil {
		if err := zr.ZoneReady(m.Zone); err != nil && !errors.Is(err, backend.ErrHostConnecting) {
			return // its host is down: refused at once, as Unavailable
		}
	}
	if hr := e.can.HostReadiness; hr != nil {
		// Its own host, or without one any host it may be on, is down:
		// no listing can come, refused at once.
		hosts := []string{m.HostName}
		if m.HostName == "" {
			hosts = e.listed.missing(m.Zone)
		}
		for _, h := range hosts {
			if err := hr.HostReady(m.Zone, h); err != nil && !errors.Is(err, backend.ErrHostConnecting) {
				return
			}
		}
	}
	e.listed.wake()
	wctx, cancel := context.WithTimeout(ctx, listingWait)
	defer cancel()
	e.listed.awaitCovers(wctx, m.Zone, m.HostName, true)
}

// ZoneListed reports whether zone has been listed since the engine started.
func (e *Engine) ZoneListed(zone string) bool { return e.listed.has(zone) }

// WaitReadyZonesListed blocks until every zone whose host is ready now
// (backend.ZoneReadiness; every zone without it) has been listed since
// Start, or ctx ends, and reports whether they all were. serve uses it so
// that a start after a lost state file serves its reachable zones with
// their marks restored, without waiting for a host that is down or still
// connecting.
func (e *Engine) WaitReadyZonesListed(ctx context.Context) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // a zone the first pass did not list waits for no later one
		select {
		case <-e.listed.first:
			cancel()
		case <-ctx.Done():
		}
	}()
	zr := e.can.ZoneReadiness
	for _, z := range e.be.Zones() {
		if zr != nil && zr.ZoneReady(z) != nil {
			continue
		}
		if !e.listed.await(ctx, z) {
			return false
		}
	}
	return true
}

// notListed is the refusal for a machine whose zone, or host, has not
// been listed since start.
func (e *Engine) notListed(m *Machine) *Error {
	if e.listed.covers(m.Zone, m.HostName) {
		return nil
	}
	e.listed.wake()
	switch {
	case !e.listed.has(m.Zone):
		return errorf(CodeUnavailable, "zone %q has not been listed since the provider started (machines, bindings and fence marks are read from its host first); retry shortly", m.Zone)
	case m.HostName != "":
		return errorf(CodeUnavailable, "host %q of zone %q has not been listed since the provider started (the machine's binding and fence marks are read from it first); retry shortly", m.HostName, m.Zone)
	}
	return errorf(CodeUnavailable, "not every host of zone %q has been listed since the provider started, and which one holds machine %q is not known (its binding and fence marks are read from it first); retry shortly", m.Zone, m.ID)
}
