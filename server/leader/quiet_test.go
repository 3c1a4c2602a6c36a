package leader

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestQuietHoldRefusedUntilFresh(t *testing.T) {
	m := NewQuiet()
	if _, _, err := m.Hold(t.Context()); !errors.As(err, new(ErrRenewalLate)) {
		t.Fatalf("hold before any look: %v; want ErrRenewalLate", err)
	}
	m.observe(true, true, time.Second)
	ctx, release, err := m.Hold(t.Context())
	if err != nil {
		t.Fatalf("hold with a fresh renewal: %v", err)
	}
	if ctx.Err() != nil || m.Held() != 1 {
		t.Fatalf("held context ended (%v) or not counted (%d)", ctx.Err(), m.Held())
	}
	release()
	if m.Held() != 0 || ctx.Err() == nil {
		t.Fatalf("release left %d holds, context err %v", m.Held(), ctx.Err())
	}
}

func TestQuietAbortsHeldMigrations(t *testing.T) {
	m := NewQuiet()
	m.observe(true, true, time.Second)
	a, releaseA, _ := m.Hold(t.Context())
	b, releaseB, _ := m.Hold(t.Context())
	defer releaseA()
	defer releaseB()
	m.observe(true, true, time.Second) // still fresh: nothing ends
	if a.Err() != nil || b.Err() != nil {
		t.Fatal("a fresh look ended a hold")
	}
	m.observe(true, false, time.Second)
	for _, ctx := range []context.Context{a, b} {
		var late ErrRenewalLate
		if ctx.Err() == nil || !errors.As(context.Cause(ctx), &late) || late.Age != time.Second {
			t.Fatalf("late renewal: hold err %v cause %v; want ended with ErrRenewalLate{1s}", ctx.Err(), context.Cause(ctx))
		}
	}
	if m.Held() != 0 {
		t.Fatalf("%d holds left after the abort", m.Held())
	}
	if _, _, err := m.Hold(t.Context()); err == nil || !strings.Contains(err.Error(), "older than 1s") {
		t.Fatalf("hold while late: %v; want refused naming the age", err)
	}
	m.observe(true, true, time.Second) // renewed again: migrations may start
	if _, release, err := m.Hold(t.Context()); err != nil {
		t.Fatalf("hold after a renewal: %v", err)
	} else {
		release()
	}
}

// A standby (never led) changes hosts freely (its connection probe);
// once it leads, a late renewal holds every change back until the next
// renewal, and losing the lease keeps it held back.
func TestQuietHoldsChangesOnceLed(t *testing.T) {
	q := NewQuiet()
	q.observe(false, false, time.Second)
	if err := q.MayChange(); err != nil {
		t.Fatalf("standby: %v; want changes allowed", err)
	}
	q.observe(true, true, time.Second)
	if err := q.MayChange(); err != nil {
		t.Fatalf("leading, fresh: %v", err)
	}
	q.observe(true, false, time.Second)
	if err := q.MayChange(); !errors.As(err, new(ErrRenewalLate)) {
		t.Fatalf("leading, late: %v; want ErrRenewalLate", err)
	}
	q.observe(true, true, time.Second)
	if err := q.MayChange(); err != nil {
		t.Fatalf("renewed: %v", err)
	}
	q.observe(false, false, time.Second) // the lease lost
	if err := q.MayChange(); err == nil {
		t.Fatal("after losing the lease: changes allowed")
	}
}
