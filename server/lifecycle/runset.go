package lifecycle

import (
	"context"
	"sync"
)

// runSet tracks the live run of each transition by operation id: the sweep
// leaves records whose run is live alone, and a graceful stop waits for
// the set to empty.
type runSet struct {
	mu   sync.Mutex
	live map[string]int
	idle chan struct{} // closed when live becomes empty
}

func (r *runSet) add(op string) {
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

func (r *runSet) done(op string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live[op]--; r.live[op] <= 0 {
		delete(r.live, op)
	}
	if len(r.live) == 0 {
		close(r.idle)
	}
}

func (r *runSet) has(op string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live[op] > 0
}

func (r *runSet) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

// wait returns nil once no run is live, or ctx's error if it ends first.
func (r *runSet) wait(ctx context.Context) error {
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
