package lifecycle

import (
	"fmt"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/fence"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
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
// passes (nil when there is no token), whether the shard is a newcomer
// (it holds no durable mark on the machine, see keepMark), or the error:
// the only place CodeFenced is produced.
func (e *Engine) fence(machineID string, t record.Token, known bool) (*record.Mark, bool, *record.Error) {
	if t.ShardID == "" {
		return nil, false, nil
	}
	key := record.MarkKey{ShardID: t.ShardID, MachineID: machineID}
	m, seen, durable := e.markOf(key, known)
	if seen && !fence.NewerThanMark(m, t.Epoch, t.Sequence) {
		return nil, false, record.Errorf(record.CodeFenced,
			"stale fencing token for machine %q: shard %s (epoch %d, sequence %d) is not newer than (epoch %d, sequence %d)",
			machineID, quoteClipped(t.ShardID), t.Epoch, t.Sequence, m.Epoch, m.Sequence)
	}
	if err := record.ValidateToken(t); err != nil {
		return nil, false, err
	}
	if known && !durable {
		if err := e.roomForShard(machineID, t.ShardID); err != nil {
			return nil, false, err
		}
	}
	return &record.Mark{Epoch: t.Epoch, Sequence: t.Sequence}, !durable, nil
}

// keepMark decides where the mark of a token that passed the fence goes
// once the call's outcome is known, and returns the mark to commit with
// it (nil: none). A shard that holds a durable mark on the machine moves
// it whatever the outcome (the contract: a token that passes advances the
// mark even if the operation then fails). A newcomer whose call is then
// refused (the machine's state, NotFound, a host not available) gets its
// mark in the bounded in-memory set only, like a mark on an unknown id
// (issue 39): a stale replay is still FailedPrecondition while it is kept,
// but the refusal leaves nothing in the store or the domain's metadata
// and does not count against ShardsPerMachine, so refused calls from
// invented shard ids can never lock a real shard out of a machine.
func (e *Engine) keepMark(id string, t record.Token, mark *record.Mark, newcomer bool, refused bool) *record.Mark {
	if mark == nil || !newcomer || !refused {
		return mark
	}
	e.unknown.Put(record.MarkKey{ShardID: t.ShardID, MachineID: id}, *mark)
	return nil
}

// roomForShard refuses a shard's first contact with a machine whose marks
// already hold ShardsPerMachine shards. Evicting an old mark instead would
// let that shard's stale tokens through, so the new shard is refused
// (ResourceExhausted, nothing applied) and counted; under
// --caller-identity=bigfleet only certified shards get this far.
func (e *Engine) roomForShard(machineID, shard string) *record.Error {
	n := e.marks.ShardsOn(machineID)
	if n < e.cfg.ShardsPerMachine {
		return nil
	}
	e.atLimit.Add(1)
	e.log.Warn("fence: a new shard's first call refused: the machine's marks are at the limit",
		"machine", machineID, "shard", quoteClipped(shard), "shards", n, "limit", e.cfg.ShardsPerMachine)
	return record.Errorf(record.CodeExhausted,
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
func (e *Engine) BusiestMachines(n int, keep func(machineID string) bool) []fence.ShardCount {
	return e.marks.Busiest(n, keep)
}

// markOf finds the mark of key, and whether it is durable: for a machine
// that exists its durable mark, else one in the bounded in-memory set
// (see unknownMarks and keepMark); for one that does not, the in-memory
// set only.
func (e *Engine) markOf(key record.MarkKey, known bool) (m record.Mark, seen, durable bool) {
	if known {
		if m, ok := e.marks.Get(key); ok {
			return m, true, true
		}
	}
	m, seen = e.unknown.Get(key)
	return m, seen, false
}

// setMark makes m the durable mark; an in-memory one of the same key
// (a newcomer's refused call, keepMark) is superseded by it.
func (e *Engine) setMark(machineID, shardID string, m record.Mark) {
	k := record.MarkKey{ShardID: shardID, MachineID: machineID}
	e.marks.Set(k, m)
	e.unknown.Delete(k)
}

// adoptUnknownMarks moves loaded marks of machine ids the engine does not
// know (stored by versions that kept them durably) into the bounded
// in-memory set, so the two never disagree about one key.
func (e *Engine) adoptUnknownMarks() {
	unknown := e.marks.TakeIf(func(k record.MarkKey) bool {
		_, ok := e.idx.Get(k.MachineID)
		return !ok
	})
	for k, m := range unknown {
		e.unknown.Put(k, m)
	}
}

// Marks returns a copy of every durable fence mark, those of existing
// machines (for the admin API).
func (e *Engine) Marks() map[record.MarkKey]record.Mark {
	return e.marks.Clone()
}

// quoteClipped quotes s for a message, clipped if it is over the shard_id
// cap: a refused value may be as long as the RPC layer allows.
func quoteClipped(s string) string {
	if len(s) <= record.MaxShardIDBytes {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:64]), len(s))
}
