// Package storetest injects the faults a real disk produces into any
// record.Store, for tests: a failed write, a full disk, a failed fsync,
// and one call of a sequence failing.
//
// A fault fails a Commit before it reaches the wrapped store, so nothing of
// that batch is written. That is what bbolt does for a failed page write or
// a failed data fsync (the meta page that would make the transaction
// visible is never written), and what the engine must assume of any failed
// Commit.
package storetest

import (
	"context"
	"fmt"
	"io/fs"
	"sync"
	"syscall"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Faulty wraps a store; Load and Close pass through.
type Faulty struct {
	record.Store

	mu      sync.Mutex
	always  error         // every Commit fails with it while set
	once    map[int]error // Commit number (1-based, since Wrap) → its error
	commits int           // Commit calls, failed ones included
	failed  int           // Commit calls that were failed
}

// Wrap returns s with no fault set.
func Wrap(s record.Store) *Faulty {
	return &Faulty{Store: s, once: map[int]error{}}
}

// ErrDiskFull is the error of a write to a full disk (errors.Is ENOSPC).
func ErrDiskFull(path string) error {
	return fmt.Errorf("store: commit to %s: %w", path, &fs.PathError{Op: "write", Path: path, Err: syscall.ENOSPC})
}

// ErrFsync is the error of a failed fsync (errors.Is EIO).
func ErrFsync(path string) error {
	return fmt.Errorf("store: commit to %s: %w", path, &fs.PathError{Op: "fdatasync", Path: path, Err: syscall.EIO})
}

// FailWrites makes every Commit fail with err until Heal (nil heals too).
func (f *Faulty) FailWrites(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.always = err
}

// DiskFull makes every Commit fail as a full disk would, until Heal.
func (f *Faulty) DiskFull() { f.FailWrites(ErrDiskFull("state.db")) }

// FsyncError makes every Commit fail as a failed fsync would, until Heal.
func (f *Faulty) FsyncError() { f.FailWrites(ErrFsync("state.db")) }

// FailCall makes the n-th Commit from now (1 = the next one) fail with err,
// once; the calls around it succeed.
func (f *Faulty) FailCall(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.once[f.commits+n] = err
}

// Heal clears every fault.
func (f *Faulty) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.always = nil
	clear(f.once)
}

// Commits is the number of Commit calls so far, failed ones included.
func (f *Faulty) Commits() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.commits
}

// Failed is the number of Commit calls that were failed by a fault.
func (f *Faulty) Failed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// Commit fails with the fault in effect, or passes b to the wrapped store.
func (f *Faulty) Commit(ctx context.Context, b record.Batch) error {
	f.mu.Lock()
	f.commits++
	err := f.always
	if e, ok := f.once[f.commits]; ok {
		delete(f.once, f.commits)
		err = e
	}
	if err != nil {
		f.failed++
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.Store.Commit(ctx, b)
}
