package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// placingBackend is a testBackend that chooses hosts (backend.Placer):
// Place hands out the hosts of next in turn; Create records the spec's
// host and what the store held for the machine when it was called.
type placingBackend struct {
	*testBackend
	st *memStore

	mu        sync.Mutex
	next      []string
	placed    []string // hosts Place returned
	unplaced  int
	creates   []string // spec.Host of each Create
	storedAt  []string // the stored record's HostName at each Create
	nothingOn map[string]bool
	failStore bool
}

func (b *placingBackend) Place(spec backend.MachineSpec) (backend.Placement, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failStore { // the store fails while the choice is recorded, then heals
		b.failStore = false
		b.st.setFail(errors.New("disk gone"))
		time.AfterFunc(30*time.Millisecond, func() { b.st.setFail(nil) })
	}
	if len(b.placed) > 0 && b.creates == nil {
		h := b.placed[0] // a booked machine keeps its host, as the planner does
		b.placed = append(b.placed, h)
		return backend.Placement{Zone: spec.Zone, Host: h}, nil
	}
	h := b.next[0]
	b.next = append(b.next[1:], h)
	b.placed = append(b.placed, h)
	return backend.Placement{Zone: spec.Zone, Host: h, Why: "spread: host " + h}, nil
}

func (b *placingBackend) Unplace(string, string) { b.mu.Lock(); b.unplaced++; b.mu.Unlock() }

func (b *placingBackend) Create(ctx context.Context, s backend.MachineSpec) (backend.Placement, error) {
	b.mu.Lock()
	b.creates = append(b.creates, s.Host)
	b.storedAt = append(b.storedAt, b.st.stored(s.MachineID).HostName)
	down := b.nothingOn[s.Host]
	b.mu.Unlock()
	if down {
		return backend.Placement{}, fmt.Errorf("create: %w: %w", backend.ErrNothingDone, backend.ErrHostUnavailable)
	}
	p, err := b.testBackend.Create(ctx, s)
	p.Host = s.Host
	return p, err
}

func (b *placingBackend) seen() (placed, creates, storedAt []string, unplaced int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.placed), slices.Clone(b.creates), slices.Clone(b.storedAt), b.unplaced
}

func placingFixture(t *testing.T, hosts ...string) (*fixture, *placingBackend) {
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	pb := &placingBackend{testBackend: f.be, st: f.st, next: hosts, nothingOn: map[string]bool{}}
	f.wrap = pb
	f.start(2, func(c *Config) { c.RetryMin = time.Millisecond })
	return f, pb
}

// The host is in the stored CREATING record before Create runs, and the
// machine ends on it with the placement's reason in its history.
func TestCreateRecordsHostFirst(t *testing.T) {
	t.Parallel()
	f, pb := placingFixture(t, "h1", "h2")
	f.toIdle("m000")
	placed, creates, storedAt, _ := pb.seen()
	if !slices.Equal(placed, []string{"h1"}) || !slices.Equal(creates, []string{"h1"}) || !slices.Equal(storedAt, []string{"h1"}) {
		t.Fatalf("placed %v, Create on %v, stored host at Create %v; want h1 each", placed, creates, storedAt)
	}
	m := f.waitState("m000", record.Idle)
	if h := m.History[len(m.History)-1]; m.HostName != "h1" || h.Note != "spread: host h1" {
		t.Fatalf("host %q, history %+v", m.HostName, h)
	}
}

// cutCreate leaves m000 CREATING (its Create placed and running) and
// shuts the engine down, as a provider stopped mid-Create.
func cutCreate(t *testing.T, f *fixture, pb *placingBackend) {
	t.Helper()
	f.be.setDelay(record.OpCreate, time.Hour)
	if _, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first Create", func() bool { _, c, _, _ := pb.seen(); return len(c) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	f.e.Shutdown(ctx)
}

// A Create cut by a restart goes back to its recorded host: Place is not
// asked again (it would pick h2 next), so no second domain is built.
func TestResumedCreateKeepsItsHost(t *testing.T) {
	t.Parallel()
	f, pb := placingFixture(t, "h1", "h2")
	cutCreate(t, f, pb)
	if st := f.st.stored("m000"); st.State != record.Creating || st.HostName != "h1" {
		t.Fatalf("stored after the cut: %s on %q", st.State, st.HostName)
	}
	f.be.setDelay(record.OpCreate, 0)
	f.start(2)
	if m := f.waitState("m000", record.Idle); m.HostName != "h1" {
		t.Fatalf("resumed Create ended on %q", m.HostName)
	}
	placed, creates, _, _ := pb.seen()
	if !slices.Equal(placed, []string{"h1"}) || !slices.Equal(creates, []string{"h1", "h1"}) {
		t.Fatalf("placed %v, Creates on %v; want one placement and both Creates on h1", placed, creates)
	}
}

// A host found disconnected before anything was asked of it gives its
// machine up: the booking is dropped and the Create is placed again.
func TestCreatePlacedAgainWhenHostNeverReached(t *testing.T) {
	t.Parallel()
	f, pb := placingFixture(t, "h1", "h2")
	pb.mu.Lock()
	pb.nothingOn["h1"] = true
	pb.mu.Unlock()
	f.toIdle("m000")
	placed, creates, storedAt, unplaced := pb.seen()
	if !slices.Equal(placed, []string{"h1", "h2"}) || !slices.Equal(creates, []string{"h1", "h2"}) || unplaced != 1 {
		t.Fatalf("placed %v, Creates on %v, unplaced %d", placed, creates, unplaced)
	}
	if !slices.Equal(storedAt, []string{"h1", "h2"}) {
		t.Fatalf("stored host at each Create %v", storedAt)
	}
	if m := f.waitState("m000", record.Idle); m.HostName != "h2" {
		t.Fatalf("ended on %q", m.HostName)
	}
}

// A resumed Create never gives its host up on "nothing done": the run
// before the restart may have built there. It waits for the host.
func TestResumedCreateWaitsForItsHost(t *testing.T) {
	t.Parallel()
	f, pb := placingFixture(t, "h1", "h2")
	cutCreate(t, f, pb)
	f.be.setDelay(record.OpCreate, 0)
	pb.mu.Lock()
	pb.nothingOn["h1"] = true
	pb.mu.Unlock()
	f.start(2, func(c *Config) { c.RetryMin = time.Millisecond })
	waitFor(t, "four Create attempts", func() bool { _, c, _, _ := pb.seen(); return len(c) >= 4 })
	placed, creates, _, unplaced := pb.seen()
	if len(placed) != 1 || unplaced != 0 || slices.ContainsFunc(creates, func(h string) bool { return h != "h1" }) {
		t.Fatalf("placed %v, Creates on %v, unplaced %d: the resumed Create left its host", placed, creates, unplaced)
	}
	pb.mu.Lock()
	pb.nothingOn["h1"] = false
	pb.mu.Unlock()
	if m := f.waitState("m000", record.Idle); m.HostName != "h1" {
		t.Fatalf("ended on %q", m.HostName)
	}
}

// A store that cannot record the choice keeps the Create from running
// (no libvirt work on a host the record does not name) until it can.
func TestCreateWaitsForItsHostToBeRecorded(t *testing.T) {
	t.Parallel()
	f, pb := placingFixture(t, "h1", "h2")
	pb.mu.Lock()
	pb.failStore = true
	pb.mu.Unlock()
	if _, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	m := f.waitState("m000", record.Idle)
	placed, creates, storedAt, _ := pb.seen()
	if len(placed) < 2 || !slices.Equal(creates, []string{"h1"}) || !slices.Equal(storedAt, []string{"h1"}) || m.HostName != "h1" {
		t.Fatalf("placed %v, Creates on %v, stored host at Create %v, ended on %q", placed, creates, storedAt, m.HostName)
	}
}
