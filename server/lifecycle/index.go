package lifecycle

import (
	"slices"
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
// Every change to a record gets a fresh revision. A revision is reserved
// before the record is written to the store and published after, so
// publications can arrive out of order; a List therefore only reports up to
// the highest revision below every reserved-but-unpublished one (safeRev).
// That is what makes cursor paging gap-free: nothing at or below a returned
// cursor can appear later.
type index struct {
	mu       sync.RWMutex
	byID     map[string]*Machine
	log      []logEntry // sorted by rev; may hold superseded entries
	stale    int        // superseded entries in log
	counter  uint64     // highest reserved revision
	inflight map[uint64]struct{}
	counts   map[StateZone]int
	watchers map[*watcher]struct{}
}

func newIndex(machines []Machine) *index {
	ix := &index{
		byID:     make(map[string]*Machine, len(machines)),
		log:      make([]logEntry, 0, len(machines)),
		inflight: make(map[uint64]struct{}),
		counts:   make(map[StateZone]int),
		watchers: make(map[*watcher]struct{}),
	}
	for i := range machines {
		m := &machines[i]
		ix.byID[m.ID] = m
		ix.log = append(ix.log, logEntry{m.Revision, m.ID})
		ix.counter = max(ix.counter, m.Revision)
		ix.counts[StateZone{m.State, m.Zone}]++
	}
	slices.SortFunc(ix.log, func(a, b logEntry) int {
		switch {
		case a.rev < b.rev:
			return -1
		case a.rev > b.rev:
			return 1
		}
		return 0
	})
	return ix
}

func (ix *index) get(id string) (*Machine, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	m, ok := ix.byID[id]
	return m, ok
}

// reserve hands out the next revision for a record about to be committed.
func (ix *index) reserve() uint64 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.counter++
	ix.inflight[ix.counter] = struct{}{}
	return ix.counter
}

// abandon releases a revision whose commit failed.
func (ix *index) abandon(rev uint64) {
	ix.mu.Lock()
	delete(ix.inflight, rev)
	ix.mu.Unlock()
}

// publish makes a committed record visible. m must carry a reserved revision.
func (ix *index) publish(m *Machine) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	delete(ix.inflight, m.Revision)
	if old, ok := ix.byID[m.ID]; ok {
		ix.stale++
		ix.counts[StateZone{old.State, old.Zone}]--
	}
	ix.byID[m.ID] = m
	ix.counts[StateZone{m.State, m.Zone}]++
	ix.insert(logEntry{m.Revision, m.ID})
	if ix.stale > len(ix.byID)+1024 {
		ix.compact()
	}
	ix.notify(m)
}

// insert keeps the log sorted; out-of-order arrivals are few and near the
// tail, so the backwards scan is short.
func (ix *index) insert(e logEntry) {
	i := len(ix.log)
	for i > 0 && ix.log[i-1].rev > e.rev {
		i--
	}
	ix.log = slices.Insert(ix.log, i, e)
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

// safeRev is the highest revision below which everything is published.
func (ix *index) safeRev() uint64 {
	if len(ix.inflight) == 0 {
		return ix.counter
	}
	low := ix.counter
	for r := range ix.inflight {
		low = min(low, r)
	}
	return low - 1
}

// list walks records changed after from, in revision order.
func (ix *index) list(from uint64, states []State, limit int) (out []*Machine, cursor uint64) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	upto := ix.safeRev()
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
