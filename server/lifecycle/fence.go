package lifecycle

import (
	"fmt"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/fence"
	"strconv"
)

// fence checks a token against the mark of (shard, machine), then the
// token's own values, in the order the contract fixes: a token that is not
// newer than its mark is FailedPrecondition even when its shard_id is over
// the cap (negative parts are ordinary int64 values, compared
// lexicographically like any other); only a token that passes the fence is
// checked for those (InvalidArgument, and the mark stays). It must run with
// the machine's lock held; known says whether the machine exists, which
// decides where its mark lives. It returns the mark to set when the token
// passes (nil when there is no token) or the error: the only place
// CodeFenced is produced.
func (e *Engine) fence(machineID string, t Token, known bool) (*Mark, *Error) {
	if t.ShardID == "" {
		return nil, nil
	}
	key := MarkKey{ShardID: t.ShardID, MachineID: machineID}
	m, seen := e.markOf(key, known)
	if seen && !fence.NewerThanMark(m, t.Epoch, t.Sequence) {
		return nil, errorf(CodeFenced,
			"stale fencing token for machine %q: shard %s (epoch %d, sequence %d) is not newer than (epoch %d, sequence %d)",
			machineID, quoteClipped(t.ShardID), t.Epoch, t.Sequence, m.Epoch, m.Sequence)
	}
	if err := validateToken(t); err != nil {
		return nil, err
	}
	if known && !seen {
		if err := e.roomForShard(machineID, t.ShardID); err != nil {
			return nil, err
		}
	}
	return &Mark{Epoch: t.Epoch, Sequence: t.Sequence}, nil
}

// roomForShard refuses a shard's first contact with a machine whose marks
// already hold ShardsPerMachine shards. Evicting an old mark instead would
// let that shard's stale tokens through, so the new shard is refused
// (ResourceExhausted, nothing applied) and counted; under
// --caller-identity=bigfleet only certified shards get this far.
func (e *Engine) roomForShard(machineID, shard string) *Error {
	n := e.marks.ShardsOn(machineID)
	if n < e.cfg.ShardsPerMachine {
		return nil
	}
	e.atLimit.Add(1)
	e.log.Warn("fence: a new shard's first call refused: the machine's marks are at the limit",
		"machine", machineID, "shard", quoteClipped(shard), "shards", n, "limit", e.cfg.ShardsPerMachine)
	return errorf(CodeExhausted,
		"machine %q already holds fence marks of %d shards (the limit): shard %s cannot be added; see the admin API's ListFenceMarks",
		machineID, n, quoteClipped(shard))
}

// ShardLimit is the bound on distinct shards with marks on one machine,
// and how many first contacts it has refused since start.
func (e *Engine) ShardLimit() (limit int, refused int64) {
	return e.cfg.ShardsPerMachine, e.atLimit.Load()
}

// BusiestMachines returns up to n machines with marks of the most distinct
// shards, most first, among those keep allows (the admin listing).
func (e *Engine) BusiestMachines(n int, keep func(machineID string) bool) []ShardCount {
	return e.marks.Busiest(n, keep)
}

// markOf finds the mark of key: durable for a machine that exists, in the
// bounded in-memory set for one that does not (see unknownMarks).
func (e *Engine) markOf(key MarkKey, known bool) (Mark, bool) {
	if !known {
		return e.unknown.Get(key)
	}
	return e.marks.Get(key)
}

func (e *Engine) setMark(machineID, shardID string, m Mark) {
	e.marks.Set(MarkKey{ShardID: shardID, MachineID: machineID}, m)
}

// adoptUnknownMarks moves loaded marks of machine ids the engine does not
// know (stored by versions that kept them durably) into the bounded
// in-memory set, so the two never disagree about one key.
func (e *Engine) adoptUnknownMarks() {
	unknown := e.marks.TakeIf(func(k MarkKey) bool {
		_, ok := e.idx.Get(k.MachineID)
		return !ok
	})
	for k, m := range unknown {
		e.unknown.Put(k, m)
	}
}

// Marks returns a copy of every durable fence mark, those of existing
// machines (for the admin API).
func (e *Engine) Marks() map[MarkKey]Mark {
	return e.marks.Clone()
}

// quoteClipped quotes s for a message, clipped if it is over the shard_id
// cap: a refused value may be as long as the RPC layer allows.
func quoteClipped(s string) string {
	if len(s) <= MaxShardIDBytes {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:64]), len(s))
}
