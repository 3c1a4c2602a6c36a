package serial

import (
	"context"
	"sync"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// CallGate lets one backend call per machine run at a time. A transition
// that timed out is FAILED at its deadline, but its backend call may still
// be inside libvirt (a backend that is slow to honour its context); the
// next transition on that machine (a Release, a new Create) waits here for
// it instead of overlapping it, keeping the backend's promise that one
// machine never sees two methods at once.
type CallGate struct {
	mu   sync.Mutex
	busy map[string]*backendCall
}

type backendCall struct {
	kind record.OpKind
	done chan struct{}
}

// Enter waits, under ctx, until no backend call runs for id, then claims
// the machine for a call of kind. leave must be called once the backend
// call has returned. If ctx ends first, enter returns the kind of the call
// that was still running and ctx's error.
func (g *CallGate) Enter(ctx context.Context, id string, kind record.OpKind) (leave func(), running record.OpKind, err error) {
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
