package reconcile

import (
	"context"
	"sync"
)

// Listed is the record of the zones, and hosts, listed since start.
//
// Mutations wait for a zone's first listing since start. Until reconcile
// Has listed a zone's host once, the engine may not know its machines'
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
// Has been listed, or any machine once every host of its zone has been,
// may change; one whose host has not (or with no recorded host, as after
// a lost state file, while any host of its zone has not) waits for it like
// a zone not listed: its fence marks are on that host.
type Listed struct {
	mu      sync.Mutex
	zones   map[string]bool
	hosts   map[string]map[string]bool // zone → hosts listed since start
	pending map[string]map[string]bool // zone → hosts never listed since start that the latest listing missed
	changed chan struct{}              // closed (and replaced) when a zone or host is newly listed
	first   chan struct{}              // closed after the first reconcile pass
	once    sync.Once
	kick    chan struct{} // wakes the reconcile loop
}

// NewListed returns the record of a start: nothing listed yet.
func NewListed() *Listed {
	return &Listed{zones: map[string]bool{}, hosts: map[string]map[string]bool{}, pending: map[string]map[string]bool{},
		changed: make(chan struct{}), first: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// Mark records a listing of zone covering hosts and missing unlisted.
func (l *Listed) Mark(zone string, hosts, unlisted []string) {
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

// Covers reports whether a machine of zone recorded on host ("" when not
// known) may change: its zone was listed, and its host too, or every
// host of the zone.
func (l *Listed) Covers(zone, host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.coversLocked(zone, host)
}

// WithoutHost reports whether zone was listed but not the machine's host
// (one lock: every mutation asks).
func (l *Listed) WithoutHost(zone, host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.zones[zone] && !l.coversLocked(zone, host)
}

func (l *Listed) coversLocked(zone, host string) bool {
	if host == NoHost {
		return l.zones[zone]
	}
	return l.zones[zone] && (len(l.pending[zone]) == 0 || (host != "" && l.hosts[zone][host]))
}

// NoHost is the host of a record that proves its machine has no domain
// anywhere: a SPECULATIVE record an intact state file holds (never
// created, or deleted by this provider). It waits for its zone's first
// listing only, not for every host: the since-start rule for a record
// without a host is for one rebuilt from the hosts after a lost state
// file, which may be on any of them (issue 38 case 5).
const NoHost = "\x00no domain"

// Missing names the hosts of zone never listed since start that the
// latest listing missed.
func (l *Listed) Missing(zone string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for h := range l.pending[zone] {
		out = append(out, h)
	}
	return out
}

// Await waits until zone is listed or ctx ends.
func (l *Listed) Await(ctx context.Context, zone string) bool {
	return l.AwaitCovers(ctx, zone, "", false)
}

// AwaitCovers waits until zone is listed (perHost: and covers host) or
// ctx ends.
func (l *Listed) AwaitCovers(ctx context.Context, zone, host string, perHost bool) bool {
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

// Has reports whether zone has been listed since start.
func (l *Listed) Has(zone string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.zones[zone]
}

// Passed records that a reconcile pass completed.
func (l *Listed) Passed() { l.once.Do(func() { close(l.first) }) }

// Wake asks for a reconcile pass soon (never blocks).
func (l *Listed) Wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// First is closed once the first reconcile pass has completed.
func (l *Listed) First() <-chan struct{} { return l.first }

// Kick receives when a pass is asked for (Wake).
func (l *Listed) Kick() <-chan struct{} { return l.kick }
