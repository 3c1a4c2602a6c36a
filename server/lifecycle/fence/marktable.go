package fence

import (
	"cmp"
	"maps"
	"slices"
	"sync"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

type (
	Mark    = record.Mark
	MarkKey = record.MarkKey
)

// DefaultShardsPerMachine bounds how many distinct shards may hold fence
// marks on one machine, unless Config says otherwise. BigFleet runs a few
// shards, and a machine meets a new one only when its shard is reassigned;
// a mark is never dropped (that would let the dropped shard's stale tokens
// through), so without a bound every invented shard_id aimed at a real
// machine would leave a durable mark, on the host too (issue 29).
const DefaultShardsPerMachine = 32

// Table holds the durable fence marks of existing machines. Besides
// the map the fence reads, it keeps each machine's shard ids, so that a
// machine's marks (handed to the backend with every transition that
// records them on the host) and its count of shards cost a lookup, not a
// scan of every mark: a fleet may hold 100k marks.
type Table struct {
	mu        sync.RWMutex
	marks     map[MarkKey]Mark
	byMachine map[string][]string // machine id → its shard ids
}

// NewTable holds the marks loaded from the store.
func NewTable(loaded map[MarkKey]Mark) *Table {
	t := &Table{marks: make(map[MarkKey]Mark, len(loaded)), byMachine: map[string][]string{}}
	for k, m := range loaded {
		t.setLocked(k, m)
	}
	return t
}

// Get returns the mark of k, if there is one.
func (t *Table) Get(k MarkKey) (Mark, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	m, ok := t.marks[k]
	return m, ok
}

// Set makes m the mark of k.
func (t *Table) Set(k MarkKey, m Mark) {
	t.mu.Lock()
	t.setLocked(k, m)
	t.mu.Unlock()
}

func (t *Table) setLocked(k MarkKey, m Mark) {
	if _, ok := t.marks[k]; !ok {
		t.byMachine[k.MachineID] = append(t.byMachine[k.MachineID], k.ShardID)
	}
	t.marks[k] = m
}

// Delete removes k's mark, if there is one.
func (t *Table) Delete(k MarkKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.marks[k]; !ok {
		return
	}
	delete(t.marks, k)
	shards := slices.DeleteFunc(t.byMachine[k.MachineID], func(s string) bool { return s == k.ShardID })
	if len(shards) == 0 {
		delete(t.byMachine, k.MachineID)
	} else {
		t.byMachine[k.MachineID] = shards
	}
}

// ShardsOn is how many distinct shards hold marks on machine id.
func (t *Table) ShardsOn(id string) int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byMachine[id])
}

// ForMachine returns machine id's marks by shard id (nil when none).
func (t *Table) ForMachine(id string) map[string]backend.FenceMark {
	t.mu.RLock()
	defer t.mu.RUnlock()
	shards := t.byMachine[id]
	if len(shards) == 0 {
		return nil
	}
	out := make(map[string]backend.FenceMark, len(shards))
	for _, shard := range shards {
		m := t.marks[MarkKey{ShardID: shard, MachineID: id}]
		out[shard] = backend.FenceMark{Epoch: m.Epoch, Sequence: m.Sequence}
	}
	return out
}

// Clone copies every mark.
func (t *Table) Clone() map[MarkKey]Mark {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return maps.Clone(t.marks)
}

// ShardCount is how many distinct shards hold marks on one machine.
type ShardCount struct {
	MachineID string
	Shards    int
}

// Busiest returns up to n machines with the most shards' marks, most
// first, ties by machine id, among those keep allows.
func (t *Table) Busiest(n int, keep func(id string) bool) []ShardCount {
	t.mu.RLock()
	out := make([]ShardCount, 0, len(t.byMachine))
	for id, shards := range t.byMachine {
		if keep(id) {
			out = append(out, ShardCount{MachineID: id, Shards: len(shards)})
		}
	}
	t.mu.RUnlock()
	slices.SortFunc(out, func(a, b ShardCount) int {
		return cmp.Or(cmp.Compare(b.Shards, a.Shards), cmp.Compare(a.MachineID, b.MachineID))
	})
	return out[:min(n, len(out))]
}

// TakeIf removes and returns the marks whose key matches (startup only).
func (t *Table) TakeIf(match func(MarkKey) bool) map[MarkKey]Mark {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[MarkKey]Mark{}
	for k, m := range t.marks {
		if match(k) {
			out[k] = m
			delete(t.marks, k)
		}
	}
	for k := range out {
		shards := slices.DeleteFunc(t.byMachine[k.MachineID], func(s string) bool { return s == k.ShardID })
		if len(shards) == 0 {
			delete(t.byMachine, k.MachineID)
		} else {
			t.byMachine[k.MachineID] = shards
		}
	}
	return out
}
