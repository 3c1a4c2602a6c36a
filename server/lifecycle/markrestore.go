package lifecycle

import (
	"context"
	"sort"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/fence"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Fence marks survive the loss of the state file as bindings do (issue 15
// case 5): every transition that writes a machine's record on the host
// (Create defines it, Configure and Drain update it) carries the machine's
// current marks (machineMarks), and the backend reports them back in
// Observed. restoreMarks raises the engine's marks to those, so a state
// file rebuilt from the hosts refuses the stale tokens the lost one did.

// machineMarks returns the durable fence marks of machine id, by shard id,
// for the backend to record with the machine (nil when it has none).
func (e *Engine) machineMarks(id string) map[string]backend.FenceMark {
	return e.marks.ForMachine(id)
}

// restoreMarks raises the marks of existing machines to those one zone's
// hosts recorded, never lowering one (the newer of the two wins), and
// makes the raised ones durable before they count. A zone whose listing
// failed is skipped; a machine id the engine does not know is ignored (it
// has no state to protect, see unknownMarks). Reconcile runs it on each
// zone's listing before the zone's records are adopted from it, so a
// machine rebuilt from a host is never seen without its marks. It returns
// how many marks it raised. Normally it raises none: the engine's marks
// are at least those it handed the backend.
func (e *Engine) restoreMarks(ctx context.Context, zi backend.ZoneInventory) int {
	raised := 0
	if zi.Err != nil {
		return 0
	}
	for _, o := range zi.Machines {
		if ctx.Err() != nil {
			return raised
		}
		if len(o.Marks) > 0 && e.hasNewerMark(o.MachineID, o.Marks) {
			raised += e.raiseMarks(o.MachineID, o.Marks)
		}
	}
	return raised
}

// hasNewerMark is the cheap check (no lock on the machine) that lets the
// common case, nothing to raise, cost map reads only.
func (e *Engine) hasNewerMark(id string, recorded map[string]backend.FenceMark) bool {
	if _, ok := e.idx.Get(id); !ok {
		return false
	}
	for shard, r := range recorded {
		if m, seen := e.marks.Get(record.MarkKey{ShardID: shard, MachineID: id}); !seen || fence.NewerThanMark(m, r.Epoch, r.Sequence) {
			return true
		}
	}
	return false
}

// raiseMarks commits, under the machine's lock (so no mutation's fence
// runs in between), the recorded marks that are newer than the engine's.
// A failed commit raises nothing now; the next reconcile tries again.
func (e *Engine) raiseMarks(id string, recorded map[string]backend.FenceMark) int {
	unlock := e.locks.Lock(id)
	defer unlock()
	b := record.Batch{Marks: map[record.MarkKey]record.Mark{}}
	for shard, r := range recorded {
		k := record.MarkKey{ShardID: shard, MachineID: id}
		if m, seen := e.marks.Get(k); !seen || fence.NewerThanMark(m, r.Epoch, r.Sequence) {
			b.Marks[k] = record.Mark{Epoch: r.Epoch, Sequence: r.Sequence}
		}
	}
	if len(b.Marks) == 0 {
		return 0
	}
	if err := e.durable(context.Background(), b); err != nil {
		e.log.Warn("reconcile: fence marks recorded on the host not restored; retried next pass",
			"machine", id, "marks", len(b.Marks), "err", err)
		return 0
	}
	shards := make([]string, 0, len(b.Marks))
	for k, m := range b.Marks {
		e.setMark(id, k.ShardID, m)
		shards = append(shards, quoteClipped(k.ShardID))
	}
	sort.Strings(shards)
	e.log.Warn("reconcile: fence marks restored from the host (the state file had lost them)",
		"machine", id, "shards", shards)
	return len(b.Marks)
}
