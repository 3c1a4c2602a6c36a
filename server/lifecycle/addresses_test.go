package lifecycle

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// addrBackend is the test backend plus backend.GuestAddresser.
type addrBackend struct {
	*testBackend
	mu    sync.Mutex
	addrs []string
	err   error
	calls int
}

func (b *addrBackend) GuestAddresses(_ context.Context, id string, pl backend.Placement) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	if pl.Domain == "" {
		return nil, errors.New("no placement")
	}
	return slices.Clone(b.addrs), b.err
}

func (b *addrBackend) set(addrs []string, err error) {
	b.mu.Lock()
	b.addrs, b.err = addrs, err
	b.mu.Unlock()
}

func newAddrFixture(t *testing.T) (*fixture, *addrBackend) {
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	ab := &addrBackend{testBackend: f.be}
	f.wrap = ab
	f.start(1)
	return f, ab
}

func TestConfigureRecordsGuestAddresses(t *testing.T) {
	t.Parallel()
	f, ab := newAddrFixture(t)
	ab.set([]string{"eth0 192.0.2.10/24", "eth0 2001:db8::10/64"}, nil)
	f.toIdle("m000")
	if m, _ := f.e.Get(t.Context(), "m000"); m.GuestAddresses() != nil || ab.calls != 0 {
		t.Fatalf("IDLE after Create: addresses %q, %d reads; want none (read at Configure)", m.GuestAddresses(), ab.calls)
	}
	f.toConfigured2("m000", "c1")
	m, _ := f.e.Get(t.Context(), "m000")
	if want := []string{"eth0 192.0.2.10/24", "eth0 2001:db8::10/64"}; !slices.Equal(m.GuestAddresses(), want) {
		t.Fatalf("addresses %q, want %q", m.GuestAddresses(), want)
	}
	last := m.History[len(m.History)-1]
	if last.Kind != record.OpConfigure || last.Note != "addresses: eth0 192.0.2.10/24, eth0 2001:db8::10/64" {
		t.Fatalf("history entry %+v", last)
	}
	if st := f.st.stored("m000"); st.History[len(st.History)-1].Note != last.Note {
		t.Fatalf("stored history note %q", st.History[len(st.History)-1].Note)
	}

	// A refreshed reading replaces it; an unreadable one leaves it unknown
	// and the Configure still succeeds.
	drainTo(f, "m000")
	ab.set(nil, errors.New("agent gone"))
	f.toConfigured2("m000", "c1")
	if m, _ := f.e.Get(t.Context(), "m000"); m.GuestAddresses() != nil || m.History[len(m.History)-1].Note != "" {
		t.Fatalf("after failed read: %q, note %q", m.GuestAddresses(), m.History[len(m.History)-1].Note)
	}

	// Delete forgets them.
	drainTo(f, "m000")
	ab.set([]string{"eth0 192.0.2.11/24"}, nil)
	f.toConfigured2("m000", "c1")
	drainTo(f, "m000")
	if _, err := f.e.Delete(t.Context(), record.DeleteRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	if m := f.waitState("m000", record.Speculative); m.GuestAddresses() != nil {
		t.Fatalf("deleted machine keeps addresses %q", m.GuestAddresses())
	}
}

func (f *fixture) toConfigured2(id, c string) {
	f.t.Helper()
	if _, err := f.e.Configure(context.Background(), record.ConfigureRequest{MachineID: id, ClusterID: c}); err != nil {
		f.t.Fatal(err)
	}
	f.waitState(id, record.Configured)
}

func drainTo(f *fixture, id string) {
	f.t.Helper()
	if _, err := f.e.Drain(context.Background(), record.DrainRequest{MachineID: id}); err != nil {
		f.t.Fatal(err)
	}
	f.waitState(id, record.Idle)
}

func TestGuestAddressesFromHistory(t *testing.T) {
	t.Parallel()
	cfg := func(outcome, note string) record.Transition {
		return record.Transition{Kind: record.OpConfigure, Outcome: outcome, Note: note}
	}
	for _, tc := range []struct {
		name string
		h    []record.Transition
		want []string
	}{
		{"none", nil, nil},
		{"configured", []record.Transition{{Kind: record.OpCreate, Outcome: "succeeded"}, cfg("succeeded", "addresses: eth0 192.0.2.1/24, eth1 198.51.100.2/24")},
			[]string{"eth0 192.0.2.1/24", "eth1 198.51.100.2/24"}},
		{"drained keeps", []record.Transition{cfg("succeeded", "addresses: eth0 192.0.2.1/24"), {Kind: record.OpDrain, Outcome: "succeeded"}}, []string{"eth0 192.0.2.1/24"}},
		{"failed configure skipped", []record.Transition{cfg("succeeded", "addresses: eth0 192.0.2.1/24"), cfg("failed", "")}, []string{"eth0 192.0.2.1/24"}},
		{"unread", []record.Transition{cfg("succeeded", "addresses: eth0 192.0.2.1/24"), cfg("succeeded", "")}, nil},
		{"new VM", []record.Transition{cfg("succeeded", "addresses: eth0 192.0.2.1/24"), {Kind: record.OpDelete, Outcome: "succeeded"}, {Kind: record.OpCreate, Outcome: "succeeded"}}, nil},
	} {
		m := record.Machine{History: tc.h}
		if got := m.GuestAddresses(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// blockingAddrBackend's reading never answers on its own: it returns only
// when its context ends, as an agent that hangs would under the
// per-command timeout.
type blockingAddrBackend struct{ *testBackend }

func (b blockingAddrBackend) GuestAddresses(ctx context.Context, _ string, _ backend.Placement) ([]string, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSlowAddressReadKeepsConfigureInTime: a reading that hangs ends
// before the Configure's deadline, which succeeds with addresses unknown.
func TestSlowAddressReadKeepsConfigureInTime(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	f.wrap = blockingAddrBackend{f.be}
	f.start(1, func(c *Config) { c.ConfigureTimeout = 500 * time.Millisecond })
	f.toIdle("m000")
	f.toConfigured2("m000", "c1")
	m, _ := f.e.Get(t.Context(), "m000")
	if last := m.History[len(m.History)-1]; last.Outcome != "succeeded" || m.GuestAddresses() != nil {
		t.Fatalf("configure entry %+v, addresses %q", last, m.GuestAddresses())
	}
}
