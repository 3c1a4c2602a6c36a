package hostconn

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// countedHandle is a handle that counts its references.
type countedHandle struct {
	refs atomic.Int32
	fail bool
}

func (c *countedHandle) Ref() error {
	if c.fail {
		return errors.New("no ref")
	}
	c.refs.Add(1)
	return nil
}

func (c *countedHandle) Free() error { c.refs.Add(-1); return nil }

// A call on several handles (a migration: source connection, domain,
// destination connection) holds a reference on each until it returns,
// even abandoned at its bound; a Ref that fails gives back those taken.
func TestHeldAllUntilTheCallReturns(t *testing.T) {
	h := New(Config{Zone: "z1", Name: "z1", URI: "test:///default", CallTimeout: 50 * time.Millisecond})
	a, b, c := &countedHandle{}, &countedHandle{}, &countedHandle{}
	release := make(chan struct{})
	err := do(h, newCallSlots(), heldAll{a, b, c}, "Migrate3", 0, func() error { <-release; return nil })
	var cte *CallTimeoutError
	if !errors.As(err, &cte) {
		t.Fatalf("call past its bound: %v", err)
	}
	for i, x := range []*countedHandle{a, b, c} {
		if x.refs.Load() != 1 {
			t.Fatalf("handle %d has %d references while the abandoned call runs, want 1", i, x.refs.Load())
		}
	}
	close(release)
	waitFor(t, 2*time.Second, func() bool { return a.refs.Load()+b.refs.Load()+c.refs.Load() == 0 })

	bad := &countedHandle{fail: true}
	if err := do(h, newCallSlots(), heldAll{a, bad, c}, "Migrate3", 0, func() error { return nil }); err == nil {
		t.Fatal("a call ran without a reference on one of its handles")
	}
	if a.refs.Load() != 0 || c.refs.Load() != 0 {
		t.Fatalf("references left after a failed Ref: %d, %d", a.refs.Load(), c.refs.Load())
	}
}
