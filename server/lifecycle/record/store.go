package record

import (
	"context"
	"errors"
)

// ErrTooLarge is what a Store's Commit wraps when a record is over what the
// store can hold (a key or value limit). The engine answers the request
// InvalidArgument, naming what was too large, never Unavailable: a retry of
// the same request cannot succeed. The documented caps (validate.go) keep
// every record far below such limits; this is defence in depth.
var ErrTooLarge = errors.New("too large for the store")

// Batch is one atomic, durable change: machine records and fence marks.
type Batch struct {
	Machines []Machine
	Marks    map[MarkKey]Mark
	// Rebuilding marks (true) or clears (false) zones whose SPECULATIVE
	// records were seeded without a listing of every host of the zone (a
	// first start, a lost state file): until it is cleared, such a record
	// proves nothing about where a domain may be, across restarts too.
	Rebuilding map[string]bool
	// DropMarks are fence marks to delete (an operator's clear, issue 39),
	// applied after Marks.
	DropMarks []MarkKey
}

// Snapshot is everything a store holds, read once at startup.
type Snapshot struct {
	// StoreID identifies this store for its whole life; cursors carry it so a
	// cursor from another store is recognised as foreign.
	StoreID  uint64
	Machines []Machine
	Marks    map[MarkKey]Mark
	// Rebuilding are the zones marked and not cleared (Batch.Rebuilding).
	Rebuilding map[string]bool
}

// Store persists the engine's state. Commit returns only once the batch is
// durable; concurrent Commits may share one fsync (group commit). Writes cost
// O(size of the batch), never O(fleet).
type Store interface {
	Load(ctx context.Context) (Snapshot, error)
	Commit(ctx context.Context, b Batch) error
	Close() error
}
