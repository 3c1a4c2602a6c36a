package index

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

type (
	Machine = record.Machine
	State   = record.State
)

// StateZone keys the machine counts.
type StateZone struct {
	State State
	Zone  string
}

type logEntry struct {
	rev uint64
	id  string
}

// Index holds the published machine records and the revision log behind
// incremental List.
//
// Every change gets its revision before it is written to the store, so the
// stored record carries its exact revision and cursors stay valid across
// restarts. Commits finish in any order, but records are published strictly
// in revision order (complete holds a finished one back until every lower
// revision is published or abandoned). So a List never hides a machine — a
// record whose new version is still being committed shows its old version —
// and when it returns cursor r, every change at or below r is visible and
// every later one gets a revision above r: paging has no gap and no
// duplicate.
type Index struct {
	mu       sync.RWMutex
	byID     map[string]*Machine
	log      []logEntry // sorted by rev; may hold superseded entries
	stale    int        // superseded entries in log
	counter  uint64     // highest reserved revision
	visible  uint64     // every revision up to here is published or abandoned
	pending  map[uint64]*pendingRev
	counts   map[StateZone]int
	watchers map[*watcher]struct{}
	// transit holds the ids of transitional records, so the sweep visits
	// those few instead of scanning the fleet under the lock.
	transit map[string]struct{}
}

// pendingRev is a reserved revision waiting for its commit and for the
// revisions below it.
type pendingRev struct {
	done      bool
	m         *Machine // nil: abandoned (the commit failed)
	published chan struct{}
}

// New indexes the records loaded from the store.
func New(machines []Machine) *Index {
	ix := &Index{
		byID:     make(map[string]*Machine, len(machines)),
		log:      make([]logEntry, 0, len(machines)),
		pending:  make(map[uint64]*pendingRev),
		counts:   make(map[StateZone]int),
		watchers: make(map[*watcher]struct{}),
		transit:  make(map[string]struct{}),
	}
	for i := range machines {
		m := &machines[i]
		m.AttachEncodingCache()
		ix.byID[m.ID] = m
		ix.log = append(ix.log, logEntry{m.Revision, m.ID})
		ix.counter = max(ix.counter, m.Revision)
		ix.counts[StateZone{m.State, m.Zone}]++
		ix.track(m)
	}
	ix.visible = ix.counter
	slices.SortFunc(ix.log, func(a, b logEntry) int {
		if c := cmp.Compare(a.rev, b.rev); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return ix
}

// Reserve hands out the next revision for a record about to be committed.
// Every reservation must be completed (publish or abandon), or publication
// stops at it.
func (ix *Index) Reserve() uint64 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.counter++
	ix.pending[ix.counter] = &pendingRev{published: make(chan struct{})}
	return ix.counter
}

// Publish makes a committed record (carrying a reserved revision) visible,
// once every lower revision is; it returns when m is visible.
func (ix *Index) Publish(m *Machine) { ix.complete(m.Revision, m) }

// Abandon releases a revision whose commit failed.
func (ix *Index) Abandon(rev uint64) { ix.complete(rev, nil) }

func (ix *Index) complete(rev uint64, m *Machine) {
	ix.mu.Lock()
	p := ix.pending[rev]
	p.done, p.m = true, m
	for {
		next, ok := ix.pending[ix.visible+1]
		if !ok || !next.done {
			break
		}
		ix.visible++
		delete(ix.pending, ix.visible)
		if next.m != nil {
			ix.apply(next.m)
		}
		close(next.published)
	}
	ix.mu.Unlock()
	<-p.published
}

// apply installs a record; ix.mu is held. The record gets its own wire
// cache here, whatever it was copied from.
func (ix *Index) apply(m *Machine) {
	m.AttachEncodingCache()
	if old, ok := ix.byID[m.ID]; ok {
		ix.stale++
		ix.counts[StateZone{old.State, old.Zone}]--
	}
	ix.byID[m.ID] = m
	ix.counts[StateZone{m.State, m.Zone}]++
	ix.track(m)
	ix.log = append(ix.log, logEntry{m.Revision, m.ID})
	if ix.stale > len(ix.byID)+1024 {
		ix.compact()
	}
	ix.notify(m)
}

func (ix *Index) Get(id string) (*Machine, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	m, ok := ix.byID[id]
	return m, ok
}

// compact drops superseded log entries in one linear pass.
func (ix *Index) compact() {
	live := ix.log[:0]
	for _, e := range ix.log {
		if m := ix.byID[e.id]; m != nil && m.Revision == e.rev {
			live = append(live, e)
		}
	}
	clear(ix.log[len(live):])
	ix.log = live
	ix.stale = 0
}

// List walks records changed after from, in revision order.
func (ix *Index) List(from uint64, states []State, limit int) (out []*Machine, cursor uint64) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	upto := ix.visible
	if from > upto {
		from = 0 // a cursor from the future can only be corrupt: full list
	}
	cursor = upto
	start, _ := slices.BinarySearchFunc(ix.log, from+1, func(e logEntry, rev uint64) int {
		switch {
		case e.rev < rev:
			return -1
		case e.rev > rev:
			return 1
		}
		return 0
	})
	for _, e := range ix.log[start:] {
		if e.rev > upto {
			break
		}
		m := ix.byID[e.id]
		if m == nil || m.Revision != e.rev || !wanted(m.State, states) {
			continue
		}
		out = append(out, m)
		if limit > 0 && len(out) == limit {
			cursor = e.rev
			break
		}
	}
	return out, cursor
}

func wanted(s State, states []State) bool {
	return len(states) == 0 || slices.Contains(states, s)
}

// Counts returns the number of machines per state and zone.
func (ix *Index) Counts() map[StateZone]int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make(map[StateZone]int, len(ix.counts))
	for k, v := range ix.counts {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

func (ix *Index) IDs() []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]string, 0, len(ix.byID))
	for id := range ix.byID {
		out = append(out, id)
	}
	return out
}

// track keeps transit in step with m; ix.mu is held.
func (ix *Index) track(m *Machine) {
	if m.State.Transitional() {
		ix.transit[m.ID] = struct{}{}
	} else {
		delete(ix.transit, m.ID)
	}
}

// Transitional returns the ids of the transitional records.
func (ix *Index) Transitional() []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]string, 0, len(ix.transit))
	for id := range ix.transit {
		out = append(out, id)
	}
	return out
}
