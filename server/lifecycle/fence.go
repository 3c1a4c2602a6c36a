package lifecycle

import "maps"

// newer reports whether token (e, s) is strictly newer than the mark,
// comparing (epoch, sequence) lexicographically. Plain comparisons: no
// arithmetic, so int64 max values cannot overflow.
func newer(m Mark, epoch, seq int64) bool {
	return epoch > m.Epoch || (epoch == m.Epoch && seq > m.Sequence)
}

// fence checks a token against the mark of (shard, machine). It must run
// with the machine's lock held. It returns the mark to store when the token
// passes (nil when there is no token) or the fencing error: the only place
// CodeFenced is produced.
func (e *Engine) fence(machineID string, t Token) (*Mark, *Error) {
	if t.ShardID == "" {
		return nil, nil
	}
	key := MarkKey{ShardID: t.ShardID, MachineID: machineID}
	e.marksMu.RLock()
	m, seen := e.marks[key]
	e.marksMu.RUnlock()
	if seen && !newer(m, t.Epoch, t.Sequence) {
		return nil, errorf(CodeFenced,
			"stale fencing token for machine %q: shard %q (epoch %d, sequence %d) is not newer than (epoch %d, sequence %d)",
			machineID, t.ShardID, t.Epoch, t.Sequence, m.Epoch, m.Sequence)
	}
	return &Mark{Epoch: t.Epoch, Sequence: t.Sequence}, nil
}

func (e *Engine) setMark(machineID, shardID string, m Mark) {
	e.marksMu.Lock()
	e.marks[MarkKey{ShardID: shardID, MachineID: machineID}] = m
	e.marksMu.Unlock()
}

// Marks returns a copy of every fence mark (for the admin API).
func (e *Engine) Marks() map[MarkKey]Mark {
	e.marksMu.RLock()
	defer e.marksMu.RUnlock()
	return maps.Clone(e.marks)
}
