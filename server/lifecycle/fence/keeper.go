package fence

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync/atomic"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Machines is what the Keeper needs of the engine: whether a machine
// exists, its lock (a mark is raised under it, so no mutation's check runs
// in between) and a durable commit of marks.
type Machines interface {
	Known(id string) bool
	Lock(id string) (unlock func())
	Commit(ctx context.Context, b record.Batch) error
}

// Keeper is the engine's fence: it checks a token against its mark,
// decides where the mark of a token that passed goes, bounds the shards
// on a machine, and raises marks to those a host recorded. It owns the
// two tables; the engine owns the machines and its accept path calls the
// Keeper under the machine's lock.
type Keeper struct {
	marks   *Table   // durable: machines that exist
	unknown *Unknown // in memory, bounded: ids that do not exist, newcomers' refused calls
	limit   int      // ShardsPerMachine
	// atLimit counts first contacts refused because the machine's marks
	// were at the limit.
	atLimit atomic.Int64
	ms      Machines
	log     *slog.Logger
}

// NewKeeper holds the marks loaded from the store; shardsPerMachine and
// unknownLimit of 0 take their defaults.
func NewKeeper(loaded map[MarkKey]Mark, shardsPerMachine, unknownLimit int, ms Machines, log *slog.Logger) *Keeper {
	if shardsPerMachine <= 0 {
		shardsPerMachine = DefaultShardsPerMachine
	}
	return &Keeper{marks: NewTable(loaded), unknown: NewUnknown(unknownLimit), limit: shardsPerMachine, ms: ms, log: log}
}

// Check checks a token against the mark of (shard, machine), then the
// token's own values, in the order the contract fixes: a token that is not
// newer than its mark is FailedPrecondition even when its shard_id is over
// the cap (negative parts are ordinary int64 values, compared
// lexicographically like any other); only a token that passes the fence is
// checked for those (InvalidArgument, and the mark stays). It must run with
// the machine's lock held; known says whether the machine exists, which
// decides where its mark lives. It returns the mark to set when the token
// passes (nil when there is no token), whether the shard is a newcomer
// (it holds no durable mark on the machine, see Keep), or the error: the
// only place CodeFenced is produced.
func (k *Keeper) Check(machineID string, t record.Token, known bool) (*Mark, bool, *record.Error) {
	if t.ShardID == "" {
		return nil, false, nil
	}
	key := MarkKey{ShardID: t.ShardID, MachineID: machineID}
	m, seen, durable := k.markOf(key, known)
	if seen && !NewerThanMark(m, t.Epoch, t.Sequence) {
		return nil, false, record.Errorf(record.CodeFenced,
			"stale fencing token for machine %q: shard %s (epoch %d, sequence %d) is not newer than (epoch %d, sequence %d)",
			machineID, QuoteShard(t.ShardID), t.Epoch, t.Sequence, m.Epoch, m.Sequence)
	}
	if err := record.ValidateToken(t); err != nil {
		return nil, false, err
	}
	if known && !durable {
		if err := k.roomForShard(machineID, t.ShardID); err != nil {
			return nil, false, err
		}
	}
	return &Mark{Epoch: t.Epoch, Sequence: t.Sequence}, !durable, nil
}

// Keep decides where the mark of a token that passed the fence goes once
// the call's outcome is known, and returns the mark to commit with it
// (nil: none). A shard that holds a durable mark on the machine moves it
// whatever the outcome (the contract: a token that passes advances the
// mark even if the operation then fails). A newcomer whose call is then
// refused (the machine's state, NotFound, a host not available) gets its
// mark in the bounded in-memory set only, like a mark on an unknown id
// (issue 39): a stale replay is still FailedPrecondition while it is kept,
// but the refusal leaves nothing in the store or the domain's metadata
// and does not count against ShardsPerMachine, so refused calls from
// invented shard ids can never lock a real shard out of a machine.
func (k *Keeper) Keep(id string, t record.Token, mark *Mark, newcomer, refused bool) *Mark {
	if mark == nil || !newcomer || !refused {
		return mark
	}
	k.unknown.Put(MarkKey{ShardID: t.ShardID, MachineID: id}, *mark)
	return nil
}

// KeepUnknown keeps the mark of a token aimed at a machine id that does
// not exist in the bounded in-memory set (see Unknown).
func (k *Keeper) KeepUnknown(id string, t record.Token, mark *Mark) {
	if mark != nil {
		k.unknown.Put(MarkKey{ShardID: t.ShardID, MachineID: id}, *mark)
	}
}

// roomForShard refuses a shard's first contact with a machine whose marks
// already hold the limit of shards. Evicting an old mark instead would
// let that shard's stale tokens through, so the new shard is refused
// (ResourceExhausted, nothing applied) and counted; under
// --caller-identity=bigfleet only certified shards get this far.
func (k *Keeper) roomForShard(machineID, shard string) *record.Error {
	n := k.marks.ShardsOn(machineID)
	if n < k.limit {
		return nil
	}
	k.atLimit.Add(1)
	k.log.Warn("fence: a new shard's first call refused: the machine's marks are at the limit",
		"machine", machineID, "shard", QuoteShard(shard), "shards", n, "limit", k.limit)
	return record.Errorf(record.CodeExhausted,
		"machine %q already holds fence marks of %d shards (the limit): shard %s cannot be added; see the admin API's ListFenceMarks",
		machineID, n, QuoteShard(shard))
}

// Limit is the bound on distinct shards with marks on one machine, and
// how many first contacts it has refused since start.
func (k *Keeper) Limit() (limit int, refused int64) { return k.limit, k.atLimit.Load() }

// markOf finds the mark of key, and whether it is durable: for a machine
// that exists its durable mark, else one in the bounded in-memory set
// (see Unknown and Keep); for one that does not, the in-memory set only.
func (k *Keeper) markOf(key MarkKey, known bool) (m Mark, seen, durable bool) {
	if known {
		if m, ok := k.marks.Get(key); ok {
			return m, true, true
		}
	}
	m, seen = k.unknown.Get(key)
	return m, seen, false
}

// Set makes m the durable mark, once committed; an in-memory one of the
// same key (a newcomer's refused call, Keep) is superseded by it.
func (k *Keeper) Set(machineID, shardID string, m Mark) {
	key := MarkKey{ShardID: shardID, MachineID: machineID}
	k.marks.Set(key, m)
	k.unknown.Delete(key)
}

// Durable returns the durable mark of key.
func (k *Keeper) Durable(key MarkKey) (Mark, bool) { return k.marks.Get(key) }

// ForgetUnknown drops key's in-memory mark and returns it, if one was kept.
func (k *Keeper) ForgetUnknown(key MarkKey) (Mark, bool) {
	m, ok := k.unknown.Get(key)
	if ok {
		k.unknown.Delete(key)
	}
	return m, ok
}

// Drop removes key's mark from both tables, once its removal is committed.
func (k *Keeper) Drop(key MarkKey) {
	k.marks.Delete(key)
	k.unknown.Delete(key)
}

// AdoptUnknown moves loaded marks of machine ids the engine does not know
// (stored by versions that kept them durably) into the bounded in-memory
// set, so the two never disagree about one key.
func (k *Keeper) AdoptUnknown() {
	unknown := k.marks.TakeIf(func(key MarkKey) bool { return !k.ms.Known(key.MachineID) })
	for key, m := range unknown {
		k.unknown.Put(key, m)
	}
}

// The durable marks, read for the backend and the admin API.
func (k *Keeper) ShardsOn(id string) int                            { return k.marks.ShardsOn(id) }
func (k *Keeper) ForMachine(id string) map[string]backend.FenceMark { return k.marks.ForMachine(id) }
func (k *Keeper) Clone() map[MarkKey]Mark                           { return k.marks.Clone() }
func (k *Keeper) Busiest(n int, keep func(id string) bool) []ShardCount {
	return k.marks.Busiest(n, keep)
}

// UnknownLen is how many in-memory marks are kept.
func (k *Keeper) UnknownLen() int { return k.unknown.Len() }

// Fence marks survive the loss of the state file as bindings do (issue 15
// case 5): every transition that writes a machine's record on the host
// (Create defines it, Configure and Drain update it) carries the machine's
// current marks (ForMachine), and the backend reports them back in
// Observed. Restore raises the marks to those, so a state file rebuilt
// from the hosts refuses the stale tokens the lost one did.

// Restore raises the marks of existing machines to those one zone's hosts
// recorded, never lowering one (the newer of the two wins), and makes the
// raised ones durable before they count. A zone whose listing failed is
// skipped; a machine id the engine does not know is ignored (it has no
// state to protect, see Unknown). Reconcile runs it on each zone's listing
// before the zone's records are adopted from it, so a machine rebuilt from
// a host is never seen without its marks. It returns how many marks it
// raised. Normally it raises none: the engine's marks are at least those
// it handed the backend.
func (k *Keeper) Restore(ctx context.Context, zi backend.ZoneInventory) int {
	raised := 0
	if zi.Err != nil {
		return 0
	}
	for _, o := range zi.Machines {
		if ctx.Err() != nil {
			return raised
		}
		if len(o.Marks) > 0 && k.hasNewerMark(o.MachineID, o.Marks) {
			raised += k.raise(o.MachineID, o.Marks)
		}
	}
	return raised
}

// hasNewerMark is the cheap check (no lock on the machine) that lets the
// common case, nothing to raise, cost map reads only.
func (k *Keeper) hasNewerMark(id string, recorded map[string]backend.FenceMark) bool {
	if !k.ms.Known(id) {
		return false
	}
	for shard, r := range recorded {
		if m, seen := k.marks.Get(MarkKey{ShardID: shard, MachineID: id}); !seen || NewerThanMark(m, r.Epoch, r.Sequence) {
			return true
		}
	}
	return false
}

// raise commits, under the machine's lock (so no mutation's fence runs in
// between), the recorded marks that are newer than the engine's. A failed
// commit raises nothing now; the next reconcile tries again.
func (k *Keeper) raise(id string, recorded map[string]backend.FenceMark) int {
	unlock := k.ms.Lock(id)
	defer unlock()
	b := record.Batch{Marks: map[MarkKey]Mark{}}
	for shard, r := range recorded {
		key := MarkKey{ShardID: shard, MachineID: id}
		if m, seen := k.marks.Get(key); !seen || NewerThanMark(m, r.Epoch, r.Sequence) {
			b.Marks[key] = Mark{Epoch: r.Epoch, Sequence: r.Sequence}
		}
	}
	if len(b.Marks) == 0 {
		return 0
	}
	if err := k.ms.Commit(context.Background(), b); err != nil {
		k.log.Warn("reconcile: fence marks recorded on the host not restored; retried next pass",
			"machine", id, "marks", len(b.Marks), "err", err)
		return 0
	}
	shards := make([]string, 0, len(b.Marks))
	for key, m := range b.Marks {
		k.Set(id, key.ShardID, m)
		shards = append(shards, QuoteShard(key.ShardID))
	}
	sort.Strings(shards)
	k.log.Warn("reconcile: fence marks restored from the host (the state file had lost them)",
		"machine", id, "shards", shards)
	return len(b.Marks)
}

// QuoteShard quotes a shard id for a message, clipped if it is over the
// shard_id cap: a refused value may be as long as the RPC layer allows.
func QuoteShard(s string) string {
	if len(s) <= record.MaxShardIDBytes {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:64]), len(s))
}
