package lifecycle

import (
	"context"
	"sync"
)

// callGate lets one backend call per machine run at a time. A transition
// that timed out is FAILED at its deadline, but its backend call may still
// be inside libvirt (a backend that is slow to honour its context); the
// next transition on that machine (a Release, a new Create) waits here for
// it instead of overlapping it, keeping the backend's promise that one
// machine never sees two methods at once.
type callGate struct {
	mu   sync.Mutex
	busy map[string]*backendCall
}

type backendCall struct {
	kind OpKind
	done chan struct{}
}

// enter waits, under ctx, until no backend call runs for id, then claims
// the machine for a call of kind. leave must be called once the backend
// call has returned. If ctx ends first, enter returns the kind of the call
// that was still running and ctx's error.
func (g *callGate) enter(ctx context.Context, id string, kind OpKind) (leave func(), running OpKind, err error) {
	for {
		g.mu.Lock()
		c := g.busy[id]
		if c == nil {
			if g.busy == nil {
				g.busy = make(map[string]*backendCall)
			}
			c = &backendCall{kind: kind, done: make(chan struct{})}
			g.busy[id] = c
			g.mu.Unlock()
			return func() {
				g.mu.Lock()
				delete(g.busy, id)
				g.mu.Unlock()
				close(c.done)
			}, "", nil
		}
		g.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, c.kind, ctx.Err()
		}
	}
}

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
