package lifecycle

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// abandoningBackend records AbandonConfigure calls and fails them with err.
type abandoningBackend struct {
	*testBackend
	mu    sync.Mutex
	calls []string
	err   error
}

func (b *abandoningBackend) AbandonConfigure(_ context.Context, id string, pl backend.Placement) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, id+"@"+pl.Zone)
	return b.err
}

func (b *abandoningBackend) called() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.calls...)
}

// cutConfigure leaves m000 CONFIGURING in the store, as a provider killed
// during the Configure would, and restarts the engine on that store.
func cutConfigure(t *testing.T, ab *abandoningBackend) *fixture {
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	ab.testBackend = f.be
	f.wrap = ab
	f.start(2)
	f.toIdle("m000")
	f.be.setDelay(record.OpConfigure, time.Hour)
	if _, err := f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: "c"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	f.e.Shutdown(ctx)
	f.be.setDelay(record.OpConfigure, 0)
	f.start(2)
	return f
}

// Issue 15 case 7: a Configure cut by a restart ends FAILED, and first the
// backend removes what it left in the guest (partial blob, hook).
func TestInterruptedConfigureIsCleanedUp(t *testing.T) {
	ab := &abandoningBackend{}
	f := cutConfigure(t, ab)
	m := f.waitState("m000", record.Failed)
	if !strings.Contains(m.LastError, "interrupted by a provider restart") || strings.Contains(m.LastError, "cleaning") {
		t.Errorf("last_error %q", m.LastError)
	}
	if got := ab.called(); len(got) != 1 || !strings.HasPrefix(got[0], "m000@") {
		t.Errorf("AbandonConfigure calls %v, want one for m000", got)
	}
}

// A cleanup that fails is said in last_error (and logged); the machine is
// FAILED all the same.
func TestInterruptedConfigureCleanupFailureIsSaid(t *testing.T) {
	ab := &abandoningBackend{err: errors.New("guest agent not responding")}
	f := cutConfigure(t, ab)
	m := f.waitState("m000", record.Failed)
	if !strings.Contains(m.LastError, "cleaning the guest failed too: guest agent not responding") {
		t.Errorf("last_error %q", m.LastError)
	}
}
