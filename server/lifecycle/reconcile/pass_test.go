package reconcile

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/caps"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// fakeEngine is reconcile.Engine over a map: the records and the one way
// to change them, without the lifecycle engine, so a pass is tested here
// alone.
type fakeEngine struct {
	mu      sync.Mutex
	recs    map[string]*record.Machine
	resumed []record.Machine // ResumeConfigure's records, in order
}

func (e *fakeEngine) Get(id string) (*record.Machine, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m, ok := e.recs[id]
	return m, ok
}

func (e *fakeEngine) IDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for id := range e.recs {
		ids = append(ids, id)
	}
	return ids
}

func (e *fakeEngine) Update(id string, x record.Expect, edit record.Edit) (*record.Machine, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cur, ok := e.recs[id]
	if !ok || !x.Matches(cur) {
		return nil, record.ErrStale
	}
	n := cur.Edit()
	if err := edit(cur, &n); err != nil {
		return nil, err
	}
	n.Revision = cur.Revision + 1
	e.recs[id] = &n
	return &n, nil
}

func (e *fakeEngine) EnterCall(context.Context, string, record.OpKind) (func(), record.OpKind, error) {
	return func() {}, "", nil
}

func (e *fakeEngine) Migrating(string, time.Time) bool { return false }

func (e *fakeEngine) RestoreMarks(context.Context, backend.ZoneInventory) int { return 0 }

func (e *fakeEngine) ResumeConfigure(m *record.Machine) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.resumed = append(e.resumed, m.Clone())
}

// passFixture: a fake backend with one zone and the engine's records.
func passFixture(t *testing.T, recs ...record.Machine) (*Reconciler, *fakeEngine, *fake.Backend) {
	t.Helper()
	be := fake.New(fake.Options{Zones: []string{"zone-a"}})
	eng := &fakeEngine{recs: map[string]*record.Machine{}}
	for i := range recs {
		recs[i].Zone, recs[i].Revision = "zone-a", 1
		recs[i].StateSince = time.Now().Add(-time.Hour) // unchanged since before the listing
		eng.recs[recs[i].ID] = &recs[i]
	}
	r := New(eng, Config{Backend: be, Caps: caps.Of(be), Listed: NewListed(), Provider: "test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now, RestartBackoff: time.Hour,
		ConfigureTimeout: time.Minute})
	return r, eng, be
}

func create(t *testing.T, be *fake.Backend, id string) backend.Placement {
	t.Helper()
	pl, err := be.Create(t.Context(), backend.MachineSpec{MachineID: id, OperationID: "op-" + id, Zone: "zone-a"})
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// A pass adopts a SPECULATIVE record's domain, fails an IDLE record whose
// VM is confirmed gone, starts an IDLE machine's crashed domain again
// (once: the next pass waits out the backoff), and leaves a running
// machine's record as it was.
func TestPassAdoptsVanishesAndRestarts(t *testing.T) {
	t.Parallel()
	r, eng, be := passFixture(t,
		record.Machine{ID: "seed", State: record.Speculative},
		record.Machine{ID: "gone", State: record.Idle, Domain: fake.DomainName("gone")},
		record.Machine{ID: "crashed", State: record.Idle},
		record.Machine{ID: "fine", State: record.Idle},
	)
	create(t, be, "seed")
	for _, id := range []string{"crashed", "fine"} {
		pl := create(t, be, id)
		eng.recs[id].Domain, eng.recs[id].HostName = pl.Domain, pl.Host
	}
	be.SetRunState("crashed", backend.RunState{State: backend.RunShutoff, Reason: "crashed"})
	fineBefore := *eng.recs["fine"]

	rep := r.Pass(t.Context())
	if rep.Adopted != 1 || rep.Vanished != 1 || rep.Restarted != 1 {
		t.Errorf("report: adopted %d, vanished %d, restarted %d; want 1 each (%+v)", rep.Adopted, rep.Vanished, rep.Restarted, rep)
	}
	if m, _ := eng.Get("seed"); m.State != record.Idle || m.Domain != fake.DomainName("seed") || m.History[len(m.History)-1].Outcome != "adopted" {
		t.Errorf("seed: %s on %q, history %v; want IDLE, adopted", m.State, m.Domain, m.History)
	}
	if m, _ := eng.Get("gone"); m.State != record.Failed || !strings.Contains(m.LastError, "vanished") {
		t.Errorf("gone: %s (%q), want FAILED naming the vanished VM", m.State, m.LastError)
	}
	m, _ := eng.Get("crashed")
	if be.Calls("start") != 1 || m.State != record.Idle || restartTrailOf(m.History).tries != 1 {
		t.Errorf("crashed: %d Start calls, %s, history %v; want one restart recorded, still IDLE", be.Calls("start"), m.State, m.History)
	}
	if vm, _ := be.VM("crashed"); !vm.Running {
		t.Error("the crashed domain was not started")
	}
	if m, _ := eng.Get("fine"); m.Revision != fineBefore.Revision {
		t.Errorf("a running machine's record changed: revision %d → %d", fineBefore.Revision, m.Revision)
	}

	// Crashed again at once: the next restart waits out the backoff.
	be.SetRunState("crashed", backend.RunState{State: backend.RunShutoff, Reason: "crashed"})
	eng.recs["crashed"].StateSince = time.Now().Add(-time.Minute)
	if rep := r.Pass(t.Context()); rep.Restarted != 0 || be.Calls("start") != 1 {
		t.Errorf("second pass: restarted %d, Start calls %d; want the backoff (1h) to hold it", rep.Restarted, be.Calls("start"))
	}
	if m, _ := eng.Get("crashed"); !isRunNote(m) {
		t.Errorf("crashed, waiting: last_error %q does not say the domain is down", m.LastError)
	}
}

// A record changed after the hosts were listed is judged next pass, never
// against a listing older than it.
func TestPassLeavesARecordNewerThanTheListing(t *testing.T) {
	t.Parallel()
	r, eng, _ := passFixture(t, record.Machine{ID: "new", State: record.Idle, Domain: fake.DomainName("new")})
	eng.recs["new"].StateSince = time.Now().Add(time.Hour) // changed "after" the listing
	rep := r.Pass(t.Context())
	if m, _ := eng.Get("new"); m.State != record.Idle || rep.Vanished != 0 {
		t.Errorf("a record newer than the listing was judged: %s, vanished %d", m.State, rep.Vanished)
	}
}

// A zone that cannot be listed is skipped, never read as empty: its
// machines do not vanish.
func TestPassSkipsAZoneThatCannotBeListed(t *testing.T) {
	t.Parallel()
	r, eng, be := passFixture(t, record.Machine{ID: "m", State: record.Idle, Domain: fake.DomainName("m")})
	be.SetZoneDown("zone-a", true)
	rep := r.Pass(t.Context())
	if m, _ := eng.Get("m"); m.State != record.Idle || rep.Vanished != 0 {
		t.Errorf("a machine of an unlisted zone: %s, vanished %d", m.State, rep.Vanished)
	}
	if rep.Zones["zone-a"] == "" {
		t.Errorf("the report does not name zone-a's error: %v", rep.Zones)
	}
	if r.listed.Has("zone-a") {
		t.Error("a zone whose listing failed was marked listed")
	}
}
