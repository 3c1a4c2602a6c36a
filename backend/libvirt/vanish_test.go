package libvirt

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// These tests run the real engine's reconcile over this backend with
// faults injected into the listing: the rule under test is that a machine
// is declared vanished only from a complete, successful listing of its
// host, confirmed by a direct lookup that says the domain does not exist.
// (server/lifecycle depends on backend only, so this test-only import makes
// no cycle.)

// engineStore is an in-memory record.Store.
type engineStore struct {
	mu sync.Mutex
	ms map[string]record.Machine
}

func (s *engineStore) Load(context.Context) (record.Snapshot, error) {
	return record.Snapshot{StoreID: 7}, nil
}

func (s *engineStore) Commit(_ context.Context, b record.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range b.Machines {
		s.ms[m.ID] = m.Clone()
	}
	return nil
}

func (s *engineStore) Close() error { return nil }

// newEngine starts an engine over b with IDLE machines ids (created through
// the engine, so on the host), periodic reconcile off.
func newEngine(t *testing.T, b *Backend, ids ...string) *lifecycle.Engine {
	t.Helper()
	var seed []record.Machine
	for _, id := range ids {
		seed = append(seed, record.Machine{ID: id, Zone: "z1", InstanceType: "small",
			CapacityType: record.CapacityOnDemand, PricePerHour: 0.01, VCPU: 1, MemoryMiB: 64,
			Allocatable: map[string]string{"cpu": "1"}})
	}
	e, err := lifecycle.New(lifecycle.Config{Provider: "libvirt-test", Seed: seed},
		&engineStore{ms: map[string]record.Machine{}}, b)
	if err != nil {
		t.Fatal(err)
	}
	e.Start(context.Background())
	t.Cleanup(e.Close)
	// The startup reconcile runs in the background: let it finish before
	// faults are armed, so it cannot consume them.
	waitFor(t, 5*time.Second, func() bool { return !e.LastReconcile().At.IsZero() })
	for _, id := range ids {
		if _, err := e.Create(context.Background(), record.CreateRequest{MachineID: id}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { m, _ := e.Get(context.Background(), id); return m.State == record.Idle })
	}
	return e
}

func stateOf(t *testing.T, e *lifecycle.Engine, id string) record.Machine {
	t.Helper()
	m, err := e.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPartialListingNeverVanishes is issue 10's path 1: GetMetadata of one
// of our domains fails mid-listing (an RPC error, the link dropping, a
// timeout). Before the fix the domain was taken for a stranger's, the
// zone's listing reported success, and reconcile turned the IDLE machine
// FAILED.
func TestPartialListingNeverVanishes(t *testing.T) {
	t.Parallel()
	for _, kind := range []faultKind{faultRPC, faultInternal, faultTimeout, faultDrop} {
		t.Run(kindName(kind), func(t *testing.T) {
			t.Parallel()
			b, f, _ := newFaultBackend(t, nil, nil)
			e := newEngine(t, b, "m1", "m2")
			name := meta.DomainName(b.cfg.Provider, "m1")
			r := f.add(&fault{op: "dom.GetMetadata", name: name, nth: 1, kind: kind})
			rep := e.Reconcile(context.Background())
			if f.hits(r) != 1 {
				t.Fatalf("the fault did not fire (hits %d)", f.hits(r))
			}
			if m := stateOf(t, e, "m1"); m.State != record.Idle || rep.Vanished != 0 {
				t.Fatalf("m1 %s (%q) after a partial listing; report %+v", m.State, m.LastError, rep)
			}
			if zerr := rep.Zones["z1"]; !strings.Contains(zerr, name) || !strings.Contains(zerr, "injected") {
				t.Fatalf("zone error %q does not name the domain and the cause", zerr)
			}
			// The fault passed (after a redial for a drop): the next
			// listing is complete and changes nothing.
			waitFor(t, 5*time.Second, func() bool { return b.ZoneReady("z1") == nil })
			rep = e.Reconcile(context.Background())
			if rep.Zones["z1"] != "" || rep.Vanished != 0 || stateOf(t, e, "m1").State != record.Idle {
				t.Fatalf("after the fault: report %+v, m1 %s", rep, stateOf(t, e, "m1").State)
			}
		})
	}
}

// TestDamagedMetadataNeverVanishes: a domain whose metadata cannot be
// decoded is not listed as ours, said so at WARN, and its machine is not
// declared vanished: the direct lookup finds the domain.
func TestDamagedMetadataNeverVanishes(t *testing.T) {
	t.Parallel()
	b, f, logs := newFaultBackend(t, nil, nil)
	e := newEngine(t, b, "m1", "m2")
	name := meta.DomainName(b.cfg.Provider, "m1")
	f.add(&fault{op: "dom.GetMetadata", name: name, kind: faultGarbage})
	for range 2 {
		rep := e.Reconcile(context.Background())
		if m := stateOf(t, e, "m1"); m.State != record.Idle || rep.Vanished != 0 {
			t.Fatalf("m1 %s (%q) with damaged metadata; report %+v", m.State, m.LastError, rep)
		}
	}
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"domain with unreadable bigfleet metadata`) ||
		!strings.Contains(logs.String(), name) {
		t.Fatalf("no WARN for the damaged record:\n%s", logs)
	}
}

// TestVanishNeedsConfirmation: a domain really gone is still declared
// vanished, but only once a direct lookup says so; a lookup that fails
// leaves the machine alone until one succeeds.
func TestVanishNeedsConfirmation(t *testing.T) {
	t.Parallel()
	b, f, _ := newFaultBackend(t, nil, nil)
	e := newEngine(t, b, "m1", "m2")
	c := testConn(t, b, "z1")
	name := meta.DomainName(b.cfg.Provider, "m1")
	if err := onDomain(lvc(c), name, func(d virt.Domain) error { _ = domstate.Destroy(d); return domstate.Undefine(d) }); err != nil {
		t.Fatal(err)
	}
	r := f.add(&fault{op: "conn.LookupDomainByName", name: name, nth: 1, kind: faultRPC})
	rep := e.Reconcile(context.Background())
	if f.hits(r) != 1 || rep.Vanished != 0 || stateOf(t, e, "m1").State != record.Idle {
		t.Fatalf("vanished without a confirming lookup: hits %d, report %+v", f.hits(r), rep)
	}
	rep = e.Reconcile(context.Background())
	m := stateOf(t, e, "m1")
	if rep.Vanished != 1 || m.State != record.Failed || !strings.Contains(m.LastError, "vanished") {
		t.Fatalf("a domain really gone: report %+v, m1 %s %q", rep, m.State, m.LastError)
	}
	if st := stateOf(t, e, "m2"); st.State != record.Idle {
		t.Fatalf("m2 %s", st.State)
	}
}

func kindName(k faultKind) string {
	return [...]string{"rpc", "internal", "timeout", "drop", "lost-reply", "block", "garbage", "error"}[k]
}
