package backoff

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestNextDoublesToTheCap(t *testing.T) {
	t.Parallel()
	b := New(100*time.Millisecond, time.Second)
	var got []time.Duration
	for range 7 {
		got = append(got, b.Next())
	}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(got, want) {
		t.Fatalf("delays %v, want %v", got, want)
	}
}

func TestInitialAboveMax(t *testing.T) {
	t.Parallel()
	// As the hand-written loops did: the first wait is Initial, the cap
	// applies from the second on.
	b := New(3*time.Second, time.Second)
	if d := b.Next(); d != 3*time.Second {
		t.Fatalf("first delay %v, want 3s", d)
	}
	if d := b.Next(); d != time.Second {
		t.Fatalf("second delay %v, want the cap 1s", d)
	}
}

func TestReset(t *testing.T) {
	t.Parallel()
	b := New(10*time.Millisecond, time.Second)
	b.Next()
	b.Next()
	b.Reset()
	if d := b.Next(); d != 10*time.Millisecond {
		t.Fatalf("after Reset %v, want 10ms", d)
	}
	if d := b.Next(); d != 20*time.Millisecond {
		t.Fatalf("second after Reset %v, want 20ms", d)
	}
}

func TestJitterStaysInHalfToFull(t *testing.T) {
	t.Parallel()
	b := New(100*time.Millisecond, 400*time.Millisecond)
	b.Jitter = true
	for i, base := range []time.Duration{100, 200, 400, 400} {
		base *= time.Millisecond
		for range 50 {
			c := *b
			if d := c.Next(); d < base/2 || d > base {
				t.Fatalf("wait %d: %v outside [%v, %v]", i, d, base/2, base)
			}
		}
		b.Next()
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	b := New(time.Hour, time.Hour)
	if err := b.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on an ended context: %v", err)
	}
	b = New(time.Millisecond, time.Millisecond)
	if err := b.Wait(t.Context()); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}
