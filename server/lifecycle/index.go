package lifecycle

import (
	"slices"
	"strings"
	"sync"
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

// index holds the published machine records and the revision log behind
// incremental List.
//
// A record gets its revision when it is published (after its commit), under
// the index lock, so revisions are handed out in publication order: when a
// List returns cursor r, every record at or below r is already visible and
// every later change gets a revision above r. That is what makes cursor
// paging gap-free without ever hiding a machine from a full List.
// Revisions are per process (cursors carry the engine's instance id), so a
// restart turns old cursors into "no cursor": one full List.
type index struct {
	mu       sync.RWMutex
	byID     map[string]*Machine
	log      []logEntry // sorted by rev; may hold superseded entries
	stale    int        // superseded entries in log
	counter  uint64     // highest published revision
	counts   map[StateZone]int
	watchers map[*watcher]struct{}
}

func newIndex(machines []Machine) *index {
	ix := &index{
		byID:     make(map[string]*Machine, len(machines)),
		log:      make([]logEntry, 0, len(machines)),
		counts:   make(map[StateZone]int),
		watchers: make(map[*watcher]struct{}),
	}
	// Keep the previous run's order (by its revisions, then ids),
	// renumbered from 1.
	slices.SortFunc(machines, func(a, b Machine) int {
		switch {
		case a.Revision < b.Revision:
			return -1
		case a.Revision > b.Revision:
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	for i := range machines {
		m := &machines[i]
		ix.counter++
		m.Revision = ix.counter
		ix.byID[m.ID] = m
		ix.log = append(ix.log, logEntry{m.Revision, m.ID})
		ix.counts[StateZone{m.State, m.Zone}]++
	}
	return ix
}

// nextRev is the revision the next publication will probably get. It is
// only stored so a restart can keep the list order; cursors never use it.
func (ix *index) nextRev() uint64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.counter + 1
}

func (ix *index) get(id string) (*Machine, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	m, ok := ix.byID[id]
	return m, ok
}

// publish makes a committed record visible and gives it the next revision.
func (ix *index) publish(m *Machine) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.counter++
	m.Revision = ix.counter
	if old, ok := ix.byID[m.ID]; ok {
		ix.stale++
		ix.counts[StateZone{old.State, old.Zone}]--
	}
	ix.byID[m.ID] = m
	ix.counts[StateZone{m.State, m.Zone}]++
	ix.log = append(ix.log, logEntry{m.Revision, m.ID})
	if ix.stale > len(ix.byID)+1024 {
		ix.compact()
	}
	ix.notify(m)
}

// compact drops superseded log entries in one linear pass.
func (ix *index) compact() {
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

// list walks records changed after from, in revision order.
func (ix *index) list(from uint64, states []State, limit int) (out []*Machine, cursor uint64) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	upto := ix.counter
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

func (ix *index) countsCopy() map[StateZone]int {
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

func (ix *index) ids() []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]string, 0, len(ix.byID))
	for id := range ix.byID {
		out = append(out, id)
	}
	return out
}
