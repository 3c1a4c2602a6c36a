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
type listedZones struct {
	mu      sync.Mutex
	zones   map[string]bool
	changed chan struct{} // closed (and replaced) when a zone is newly listed
	first   chan struct{} // closed after the first reconcile pass
	once    sync.Once
	kick    chan struct{} // wakes the reconcile loop
}

func newListedZones() *listedZones {
	return &listedZones{zones: map[string]bool{}, changed: make(chan struct{}), first: make(chan struct{}),
		kick: make(chan struct{}, 1)}
}

func (l *listedZones) mark(zone string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.zones[zone] {
		l.zones[zone] = true
		close(l.changed)
		l.changed = make(chan struct{})
	}
}

// await waits until zone is listed or ctx ends.
func (l *listedZones) await(ctx context.Context, zone string) bool {
	for {
		l.mu.Lock()
		ok, ch := l.zones[zone], l.changed
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
	m, ok := e.idx.get(id)
	if !ok || e.listed.has(m.Zone) {
		return
	}
	if zr, ok := e.be.(backend.ZoneReadiness); ok {
		if err := zr.ZoneReady(m.Zone); err != nil && !errors.Is(err, backend.ErrHostConnecting) {
			return // its host is down: refused at once, as Unavailable
		}
	}
	e.listed.wake()
	wctx, cancel := context.WithTimeout(ctx, listingWait)
	defer cancel()
	e.listed.await(wctx, m.Zone)
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
	zr, _ := e.be.(backend.ZoneReadiness)
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

// notListed is the refusal for a zone not listed since start.
func (e *Engine) notListed(zone string) *Error {
	if e.listed.has(zone) {
		return nil
	}
	e.listed.wake()
	return errorf(CodeUnavailable, "zone %q has not been listed since the provider started (machines, bindings and fence marks are read from its host first); retry shortly", zone)
}
