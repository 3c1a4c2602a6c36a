package lifecycle

import (
	"context"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/fence"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// The fence itself (checking tokens, keeping and restoring marks) is
// fence.Keeper; the engine calls it under the machine's lock and lends it
// the three things it needs of the machines.

// fenceMachines is the engine as the Keeper sees it.
type fenceMachines struct{ e *Engine }

func (f fenceMachines) Known(id string) bool {
	_, ok := f.e.idx.Get(id)
	return ok
}

func (f fenceMachines) Lock(id string) func() { return f.e.locks.Lock(id) }

func (f fenceMachines) Commit(ctx context.Context, b record.Batch) error { return f.e.durable(ctx, b) }

// machineMarks returns the durable fence marks of machine id, by shard id,
// for the backend to record with the machine (nil when it has none).
func (e *Engine) machineMarks(id string) map[string]backend.FenceMark {
	return e.fences.ForMachine(id)
}

// ShardLimit is the bound on distinct shards with marks on one machine,
// and how many first contacts it has refused since start.
func (e *Engine) ShardLimit() (limit int, refused int64) { return e.fences.Limit() }

// BusiestMachines returns up to n machines with marks of the most distinct
// shards, most first, among those keep allows (the admin listing).
func (e *Engine) BusiestMachines(n int, keep func(machineID string) bool) []fence.ShardCount {
	return e.fences.Busiest(n, keep)
}

// Marks returns a copy of every durable fence mark, those of existing
// machines (for the admin API).
func (e *Engine) Marks() map[record.MarkKey]record.Mark { return e.fences.Clone() }
