package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is one loop's delay. The zero value is not useful: use New.
// It is not safe for concurrent use (each loop has its own).
type Backoff struct {
	Initial time.Duration // the first delay (and the delay after Reset)
	Max     time.Duration // the cap of the doubling
	// Jitter: Next returns a random time in [d/2, d] for the delay d,
	// and the delay still doubles from d.
	Jitter bool

	cur time.Duration
}

// New returns a Backoff starting at initial, doubling up to max.
func New(initial, max time.Duration) *Backoff {
	return &Backoff{Initial: initial, Max: max, cur: initial}
}

// Next returns the delay to wait now and doubles the next one, up to Max.
func (b *Backoff) Next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.Max)
	if b.Jitter {
		return d/2 + rand.N(d/2+1)
	}
	return d
}

// Reset starts the doubling again from Initial.
func (b *Backoff) Reset() { b.cur = b.Initial }

// Wait sleeps for Next, or until ctx ends; it returns ctx.Err() if ctx
// ended first, else nil.
func (b *Backoff) Wait(ctx context.Context) error {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
