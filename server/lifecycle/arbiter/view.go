package arbiter

import (
	"slices"
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// HostState is one host's standing in a View.
type HostState uint8

const (
	// Unlisted: the latest listing did not cover the host; it may hold
	// any copy, running or not.
	Unlisted HostState = iota
	// Listed: the host answered; its copies are in the view.
	Listed
	// Down: the operator declared the host down for sure; it counts as
	// listed with nothing running.
	Down
)

func (s HostState) String() string { return [...]string{"unlisted", "listed", "down"}[s] }

// View is one zone as one listing saw it: each host's standing and the
// copies of each machine on the listed hosts.
type View struct {
	Zone string
	At   time.Time // when the listing began
	// whole: the zone is one host without a name (a --connect zone): a
	// successful listing covers it all.
	whole  bool
	hosts  map[string]HostState
	down   map[string]string // declared-down reasons
	copies map[string][]backend.Observed
}

// FromInventory builds the view of one zone's listing (taken at at). A
// listing that failed (zi.Err) covers no host.
func FromInventory(zi backend.ZoneInventory, at time.Time) *View {
	v := &View{Zone: zi.Zone, At: at, hosts: map[string]HostState{}, down: zi.Down, copies: map[string][]backend.Observed{}}
	if zi.Err != nil {
		for _, h := range zi.Hosts {
			v.hosts[h] = Unlisted
		}
		for _, h := range zi.Unlisted {
			v.hosts[h] = Unlisted
		}
		return v
	}
	v.whole = len(zi.Hosts) == 0 && len(zi.Unlisted) == 0
	for _, h := range zi.Hosts {
		v.hosts[h] = Listed
	}
	for _, h := range zi.Unlisted {
		v.hosts[h] = Unlisted
	}
	for h := range zi.Down {
		v.hosts[h] = Down
	}
	for _, o := range zi.Machines {
		v.copies[o.MachineID] = append(v.copies[o.MachineID], o)
	}
	return v
}

// State is host's standing ("" is the host of a whole zone: Listed when
// the listing succeeded).
func (v *View) State(host string) HostState {
	if s, ok := v.hosts[host]; ok {
		return s
	}
	if v.whole || host == "" && !v.anyUnlisted() {
		return Listed
	}
	return Unlisted
}

// DownReason reports whether host is declared down, and why.
func (v *View) DownReason(host string) (string, bool) {
	if v.State(host) != Down {
		return "", false
	}
	return v.down[host], true
}

// Copies are machine id's copies on the listed hosts.
func (v *View) Copies(id string) []backend.Observed { return v.copies[id] }

func (v *View) copyOn(id, host string) (backend.Observed, bool) {
	for _, c := range v.copies[id] {
		if c.Placement.Host == host {
			return c, true
		}
	}
	return backend.Observed{}, false
}

func (v *View) anyUnlisted() bool {
	for _, s := range v.hosts {
		if s == Unlisted {
			return true
		}
	}
	return false
}

// unlisted names the zone's unlisted hosts other than except, sorted.
func (v *View) unlisted(except string) []string {
	set := map[string]bool{}
	for h, s := range v.hosts {
		if s == Unlisted && h != except {
			set[h] = true
		}
	}
	return sorted(set)
}

// Hosts names the zone's hosts in the view, sorted.
func (v *View) Hosts() []string {
	out := make([]string, 0, len(v.hosts))
	for h := range v.hosts {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// Views holds the latest view of each zone, for the paths that decide
// outside a reconcile pass (a Configure that finds its domain stopped).
type Views struct {
	mu    sync.Mutex
	zones map[string]*View
}

// NewViews returns an empty set: no zone viewed yet.
func NewViews() *Views { return &Views{zones: map[string]*View{}} }

// Put records v as its zone's latest view, unless a newer one is there.
func (s *Views) Put(v *View) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.zones[v.Zone]; old == nil || !old.At.After(v.At) {
		s.zones[v.Zone] = v
	}
}

// Get returns zone's latest view (nil: not viewed since start). A View is
// never changed once put, so the caller may read it freely.
func (s *Views) Get(zone string) *View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.zones[zone]
}
