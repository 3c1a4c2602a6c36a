package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

var errDropped = fmt.Errorf("destroy domain: End of file while reading data: %w", backend.ErrTransient)

func fastRetry(c *Config) { c.RetryMin = time.Millisecond }

// waitCalls polls until op k was attempted at least n times.
func (f *fixture) waitCalls(k record.OpKind, n int) {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.be.mu.Lock()
		got := f.be.calls[k]
		f.be.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s attempted %d times, want %d", k, got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTransientFaultsAreRetried: a host that drops mid-call (ErrTransient)
// or is down (ErrHostUnavailable) costs a transition time, never the
// machine: the call runs again until it succeeds, for every kind.
func TestTransientFaultsAreRetried(t *testing.T) {
	t.Parallel()
	down := fmt.Errorf("zone-a: %w: connection closed", backend.ErrHostUnavailable)
	for _, tc := range []struct {
		kind  record.OpKind
		fault error
		to    record.State
		drive func(f *fixture, id string)
	}{
		{record.OpCreate, errDropped, record.Idle, func(f *fixture, id string) {
			_, _ = f.e.Create(context.Background(), record.CreateRequest{MachineID: id})
		}},
		{record.OpConfigure, down, record.Configured, func(f *fixture, id string) {
			f.toIdle(id)
			_, _ = f.e.Configure(context.Background(), record.ConfigureRequest{MachineID: id, ClusterID: "c", BootstrapBlob: []byte("b")})
		}},
		{record.OpDrain, errDropped, record.Idle, func(f *fixture, id string) {
			f.toConfigured(id, "c")
			_, _ = f.e.Drain(context.Background(), record.DrainRequest{MachineID: id})
		}},
		{record.OpDelete, down, record.Speculative, func(f *fixture, id string) {
			f.toIdle(id)
			_, _ = f.e.Delete(context.Background(), record.DeleteRequest{MachineID: id})
		}},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 1, fastRetry)
			id := seed(1)[0].ID
			f.be.setFail(tc.kind, tc.fault)
			tc.drive(f, id)
			f.waitCalls(tc.kind, 3)
			if m, _ := f.e.Get(context.Background(), id); m.State == record.Failed {
				t.Fatalf("FAILED on a transient fault: %s", m.LastError)
			}
			f.be.setFail(tc.kind, nil) // the host is back
			f.waitState(id, tc.to)
		})
	}
}

// TestTransientFaultUntilDeadline: a fault that outlasts the deadline ends
// the transition FAILED at the deadline, saying it timed out and what the
// last fault was.
func TestTransientFaultUntilDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, fastRetry, func(c *Config) { c.CreateTimeout = 200 * time.Millisecond })
	id := seed(1)[0].ID
	f.be.setFail(record.OpCreate, errDropped)
	if _, err := f.e.Create(context.Background(), record.CreateRequest{MachineID: id}); err != nil {
		t.Fatal(err)
	}
	m := f.waitState(id, record.Failed)
	if !strings.Contains(m.LastError, "create timed out after 200ms") || !strings.Contains(m.LastError, "last error: destroy domain: End of file") {
		t.Fatalf("last_error %q", m.LastError)
	}
}

// TestRealFailuresAreNotRetried: an error that is not transient fails the
// transition at once, after one call.
func TestRealFailuresAreNotRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, fastRetry)
	id := seed(1)[0].ID
	f.be.setFail(record.OpCreate, errors.New("overlay volume: no space left on device"))
	if _, err := f.e.Create(context.Background(), record.CreateRequest{MachineID: id}); err != nil {
		t.Fatal(err)
	}
	m := f.waitState(id, record.Failed)
	f.be.mu.Lock()
	calls := f.be.calls[record.OpCreate]
	f.be.mu.Unlock()
	if calls != 1 || !strings.Contains(m.LastError, "no space left") {
		t.Fatalf("calls %d, last_error %q", calls, m.LastError)
	}
}
