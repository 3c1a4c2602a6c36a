package store

import (
	"context"
	"errors"
	"maps"
	"sync"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// ErrClosed is returned by Commit and Load after Close. The engine maps it
// (like any store failure) to Unavailable.
var ErrClosed = errors.New("store: closed")

// Memory is a non-durable record.Store. Everything is lost with the
// process; it exists for tests and for running explicitly without --state.
type Memory struct {
	mu       sync.Mutex
	closed   bool
	id       uint64
	machines map[string]record.Machine
	marks    map[record.MarkKey]record.Mark
	// rebuilding: the zones Batch.Rebuilding marked and did not clear.
	rebuilding map[string]bool
}

var _ record.Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store with a fresh random store id,
// so cursors from a previous process are recognised as foreign.
func NewMemory() *Memory {
	return &Memory{
		id:         newStoreID(),
		machines:   make(map[string]record.Machine),
		marks:      make(map[record.MarkKey]record.Mark),
		rebuilding: make(map[string]bool),
	}
}

// Load returns deep copies of everything held.
func (s *Memory) Load(ctx context.Context) (record.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return record.Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return record.Snapshot{}, ErrClosed
	}
	snap := record.Snapshot{
		StoreID:    s.id,
		Machines:   make([]record.Machine, 0, len(s.machines)),
		Marks:      maps.Clone(s.marks), // Mark and MarkKey are plain values
		Rebuilding: maps.Clone(s.rebuilding),
	}
	for _, m := range s.machines {
		snap.Machines = append(snap.Machines, m.Clone())
	}
	return snap, nil
}

// Commit applies the batch atomically. It copies the records so a caller's
// later edits of its maps cannot reach the stored state.
func (s *Memory) Commit(ctx context.Context, b record.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validate(b); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	for _, m := range b.Machines {
		s.machines[m.ID] = m.Clone()
	}
	maps.Copy(s.marks, b.Marks)
	for _, k := range b.DropMarks {
		delete(s.marks, k)
	}
	applyRebuilding(s.rebuilding, b.Rebuilding)
	return nil
}

// Close makes later calls fail; it is idempotent.
func (s *Memory) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}
