package fence

import (
	"container/list"
	"sync"
)

// DefaultUnknownMarkLimit is how many fence marks for machine ids that do
// not exist the engine keeps (in memory), unless Config says otherwise. At
// most ~600 bytes each (shard_id and machine id at their caps), that is
// about 6 MB at worst.
const DefaultUnknownMarkLimit = 10_000

// Unknown holds the fence marks of (shard, machine) pairs whose
// machine id does not exist, least recently used first out.
//
// Why not the store: the contract makes the fence answer before not-found
// (a stale token aimed at an unknown id is FailedPrecondition), so such a
// token must leave a mark; but anyone can send fresh tokens for endless
// invented ids, and durable marks for them would grow the state file
// without bound (100 NotFound calls stored 100 marks). A mark protects a
// machine's state from a stale writer; an unknown id has no state, and
// every call on it is NotFound, which changes nothing. So forgetting such
// a mark (on eviction or restart) can only turn a later stale replay from
// FailedPrecondition into NotFound: still refused, still nothing changed.
//
// The engine keeps here too the mark of a shard's refused first calls on
// a machine that exists (issue 39): that call changed nothing either, and
// a durable mark would let invented shard ids fill the machine's
// ShardsPerMachine bound. Such a mark is deleted once the shard's mark
// becomes durable.
type Unknown struct {
	mu    sync.Mutex
	limit int
	order *list.List // of *unknownMark, most recently used at the front
	byKey map[MarkKey]*list.Element
}

type unknownMark struct {
	key  MarkKey
	mark Mark
}

// NewUnknown keeps at most limit marks (0: DefaultUnknownMarkLimit).
func NewUnknown(limit int) *Unknown {
	if limit <= 0 {
		limit = DefaultUnknownMarkLimit
	}
	return &Unknown{limit: limit, order: list.New(), byKey: make(map[MarkKey]*list.Element)}
}

// Get returns the mark of k, if it is still kept.
func (u *Unknown) Get(k MarkKey) (Mark, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	el, ok := u.byKey[k]
	if !ok {
		return Mark{}, false
	}
	u.order.MoveToFront(el)
	return el.Value.(*unknownMark).mark, true
}

// Put sets k's mark, evicting the least recently used one over the limit.
func (u *Unknown) Put(k MarkKey, m Mark) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if el, ok := u.byKey[k]; ok {
		el.Value.(*unknownMark).mark = m
		u.order.MoveToFront(el)
		return
	}
	u.byKey[k] = u.order.PushFront(&unknownMark{key: k, mark: m})
	for u.order.Len() > u.limit {
		oldest := u.order.Back()
		u.order.Remove(oldest)
		delete(u.byKey, oldest.Value.(*unknownMark).key)
	}
}

// Delete forgets k's mark, if it is kept.
func (u *Unknown) Delete(k MarkKey) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if el, ok := u.byKey[k]; ok {
		u.order.Remove(el)
		delete(u.byKey, k)
	}
}

// Len is how many marks are kept.
func (u *Unknown) Len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.order.Len()
}
