package lifecycle

import "context"

// Batch is one atomic, durable change: machine records and fence marks.
type Batch struct {
	Machines []Machine
	Marks    map[MarkKey]Mark
}

// Snapshot is everything a store holds, read once at startup.
type Snapshot struct {
	// StoreID identifies this store for its whole life; cursors carry it so a
	// cursor from another store is recognised as foreign.
	StoreID  uint64
	Machines []Machine
	Marks    map[MarkKey]Mark
}

// Store persists the engine's state. Commit returns only once the batch is
// durable; concurrent Commits may share one fsync (group commit). Writes cost
// O(size of the batch), never O(fleet).
type Store interface {
	Load(ctx context.Context) (Snapshot, error)
	Commit(ctx context.Context, b Batch) error
	Close() error
}
