package serial

import (
	"context"
	"sync"
)

// RunSet tracks the live run of each transition by operation id: the sweep
// leaves records whose run is live alone, and a graceful stop waits for
// the set to empty.
type RunSet struct {
	mu   sync.Mutex
	live map[string]int
	idle chan struct{} // closed when live becomes empty
}

// Add registers a run of op.
func (r *RunSet) Add(op string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live == nil {
		r.live = make(map[string]int)
	}
	if len(r.live) == 0 {
		r.idle = make(chan struct{})
	}
	r.live[op]++
}

// Done ends a run of op.
func (r *RunSet) Done(op string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live[op]--; r.live[op] <= 0 {
		delete(r.live, op)
	}
	if len(r.live) == 0 {
		close(r.idle)
	}
}

// Has reports whether a run of op is live.
func (r *RunSet) Has(op string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live[op] > 0
}

// Len is how many operations have a live run.
func (r *RunSet) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

// Wait returns nil once no run is live, or ctx's error if it ends first.
func (r *RunSet) Wait(ctx context.Context) error {
	for {
		r.mu.Lock()
		if len(r.live) == 0 {
			r.mu.Unlock()
			return nil
		}
		idle := r.idle
		r.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
