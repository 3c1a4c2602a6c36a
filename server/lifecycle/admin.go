package lifecycle

// The operator's writes on one machine (admin API, behind --admin-write):
// Release out of FAILED and ClearMark of a shard's fence mark.

import (
	"context"
	"fmt"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/fence"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// ClearMark removes shard's fence mark on machine id: the operator's way
// to free a machine whose marks are at ShardsPerMachine, so that a shard
// refused there (ResourceExhausted) can act again (admin API, behind
// --admin-write; issue 39). It is not part of BigFleet's contract: the
// cleared shard's next token is a first contact again, so its stale
// tokens would pass; clear only a shard that is gone or invented.
//
// The mark goes from the domain's metadata first (the backend's
// MarkClearer), then from the state with a history entry naming by, in one
// commit: a crash in between leaves the state's mark, which a retry
// clears, never a cleared state whose host would restore the mark. Only
// a machine in a stable state is cleared: a running transition may be
// writing its metadata.
func (e *Engine) ClearMark(ctx context.Context, id, shard, by string) (ClearedMark, error) {
	if err := record.ValidateID("machine_id", id); err != nil {
		return ClearedMark{}, err
	}
	if shard == "" {
		return ClearedMark{}, record.Errorf(record.CodeInvalid, "shard_id is required (ListFenceMarks names the shards with marks)")
	}
	unlock := e.locks.Lock(id)
	defer unlock()
	cur, known := e.idx.Get(id)
	if !known {
		return ClearedMark{}, record.Errorf(record.CodeNotFound, "machine %q not found", id)
	}
	key := record.MarkKey{ShardID: shard, MachineID: id}
	m, durable := e.fences.Durable(key)
	if !durable {
		if m, ok := e.fences.ForgetUnknown(key); ok {
			// A newcomer's refused call left it in memory only (Keep):
			// nothing durable to change.
			return e.cleared(m, cur), nil
		}
		return ClearedMark{}, record.Errorf(record.CodeNotFound, "shard %s holds no fence mark on machine %q", fence.QuoteShard(shard), id)
	}
	if err := e.clearable(cur); err != nil {
		return ClearedMark{}, err
	}
	if mc := e.can.MarkClearer; mc != nil && cur.Domain != "" {
		if err := mc.ClearMark(ctx, id, cur.Placement(), shard); err != nil {
			return ClearedMark{}, record.Errorf(record.CodeUnavailable, "machine %q: the mark is unchanged: %v", id, err)
		}
	}
	n, err := e.commitClear(ctx, cur, key, m, by)
	if err != nil {
		return ClearedMark{}, err
	}
	return e.cleared(m, n), nil
}

// ClearedMark is what ClearMark did.
type ClearedMark struct {
	Mark    record.Mark    // the mark removed
	Machine record.Machine // the machine afterwards
	// ShardsLeft is how many shards still hold durable marks on it.
	ShardsLeft int
}

func (e *Engine) cleared(m record.Mark, n *record.Machine) ClearedMark {
	return ClearedMark{Mark: m, Machine: n.Clone(), ShardsLeft: e.fences.ShardsOn(n.ID)}
}

// clearable refuses a machine whose metadata a transition or a migration
// may be writing.
func (e *Engine) clearable(m *record.Machine) *record.Error {
	if m.State.Transitional() {
		return record.Errorf(record.CodeAborted, "cannot clear a fence mark of machine %q: it is %s; retry once it is stable", m.ID, m.State)
	}
	return e.moves.Refusal(m.ID)
}

// commitClear drops the mark and records the clear in the machine's
// history, in one commit, then applies both.
func (e *Engine) commitClear(ctx context.Context, cur *record.Machine, key record.MarkKey, m record.Mark, by string) (*record.Machine, error) {
	now := e.cfg.Now()
	n := cur.Edit()
	n.History = record.AppendHistory(n.History, record.Transition{OperationID: cur.OperationID, Kind: record.OpFenceClear,
		From: cur.State, To: cur.State, Started: now, Ended: now, Outcome: "succeeded",
		Note: fmt.Sprintf("fence mark of shard %s (epoch %d, sequence %d) cleared by %s", fence.QuoteShard(key.ShardID), m.Epoch, m.Sequence, by)})
	n.Revision = e.idx.Reserve()
	if err := e.durable(ctx, record.Batch{Machines: []record.Machine{n}, DropMarks: []record.MarkKey{key}}); err != nil {
		e.idx.Abandon(n.Revision)
		e.log.Error("store commit failed", "machine", cur.ID, "err", err)
		return nil, record.Errorf(record.CodeUnavailable, "cannot persist the change: store unavailable")
	}
	e.fences.Drop(key)
	e.idx.Publish(&n)
	e.log.Warn("fence mark cleared", "machine", cur.ID, "shard", fence.QuoteShard(key.ShardID),
		"epoch", m.Epoch, "sequence", m.Sequence, "by", by, "shards_left", e.fences.ShardsOn(cur.ID))
	return &n, nil
}

// Release is the operator's way out of FAILED (admin API, behind
// --admin-write): it destroys whatever is left of the VM and returns the
// slot to SPECULATIVE through DELETING. BigFleet itself never re-drives a
// FAILED machine; this is not part of its contract.
func (e *Engine) Release(ctx context.Context, id string) (record.Ack, error) {
	return e.mutate(ctx, id, record.Token{}, nil, func(m *record.Machine) decision {
		switch {
		case m.State == record.Deleting && m.OpKind == record.OpRelease:
			return retry(m)
		case m.State != record.Failed:
			return refuse(record.CodeAborted, "cannot release machine %q: it is %s, only FAILED machines can be released", m.ID, m.State)
		}
		return e.begin(m, record.OpRelease, record.Deleting, e.cfg.DeleteTimeout, nil)
	})
}
