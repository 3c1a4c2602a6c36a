package reconcile

import (
	"testing"
	"time"
)

// TestRestartDelaySchedule: B, 2B, 4B, … capped at 32B.
func TestRestartDelaySchedule(t *testing.T) {
	t.Parallel()
	r := &Reconciler{cfg: Config{RestartBackoff: 10 * time.Second}}
	want := []time.Duration{10, 20, 40, 80, 160, 320, 320, 320}
	for i, w := range want {
		if got := r.restartDelay(i + 1); got != w*time.Second {
			t.Fatalf("delay after try %d: %s, want %s", i+1, got, w*time.Second)
		}
	}
	if d := (&Reconciler{}).restartDelay(1); d != DefaultRestartBackoff {
		t.Fatalf("default backoff %s", d)
	}
}
