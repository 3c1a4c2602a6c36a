package lifecycle

import (
	"maps"
	"sync"

	"github.com/bigfleet/libvirt-provider/backend"
)

// markTable holds the durable fence marks of existing machines. Besides
// the map the fence reads, it keeps the set of shard ids seen, so that a
// machine's marks (handed to the backend with every transition that
// records them on the host) cost one lookup per shard, not a scan of
// every mark: BigFleet runs few shards, and a fleet may hold 100k marks.
type markTable struct {
	mu     sync.RWMutex
	marks  map[MarkKey]Mark
	shards map[string]struct{}
}

func newMarkTable(loaded map[MarkKey]Mark) *markTable {
	t := &markTable{marks: make(map[MarkKey]Mark, len(loaded)), shards: map[string]struct{}{}}
	for k, m := range loaded {
		t.marks[k] = m
		t.shards[k.ShardID] = struct{}{}
	}
	return t
}

func (t *markTable) get(k MarkKey) (Mark, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	m, ok := t.marks[k]
	return m, ok
}

func (t *markTable) set(k MarkKey, m Mark) {
	t.mu.Lock()
	t.marks[k] = m
	t.shards[k.ShardID] = struct{}{}
	t.mu.Unlock()
}

// forMachine returns machine id's marks by shard id (nil when none).
func (t *markTable) forMachine(id string) map[string]backend.FenceMark {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out map[string]backend.FenceMark
	for shard := range t.shards {
		m, ok := t.marks[MarkKey{ShardID: shard, MachineID: id}]
		if !ok {
			continue
		}
		if out == nil {
			out = make(map[string]backend.FenceMark)
		}
		out[shard] = backend.FenceMark{Epoch: m.Epoch, Sequence: m.Sequence}
	}
	return out
}

func (t *markTable) clone() map[MarkKey]Mark {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return maps.Clone(t.marks)
}

// takeIf removes and returns the marks whose key matches (startup only:
// the shard set may keep a shard no mark uses any more, which costs a
// lookup, never a wrong answer).
func (t *markTable) takeIf(match func(MarkKey) bool) map[MarkKey]Mark {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[MarkKey]Mark{}
	for k, m := range t.marks {
		if match(k) {
			out[k] = m
			delete(t.marks, k)
		}
	}
	return out
}
