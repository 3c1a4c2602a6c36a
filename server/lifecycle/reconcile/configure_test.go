package reconcile

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/caps"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// cutConfigure leaves the intent of a Configure (op, cluster c, shard
// metadata k=v) on id's fake VM and nothing else of it, as a provider
// killed before the hook would.
func cutConfigure(t *testing.T, be *fake.Backend, id, op string) {
	t.Helper()
	cut, cancel := context.WithCancel(t.Context())
	cancel()
	err := be.Configure(cut, backend.ConfigureSpec{MachineID: id, OperationID: op, ClusterID: "c",
		BootstrapBlob: []byte("secret"), ShardMetadata: map[string]string{"k": "v"}})
	if err == nil {
		t.Fatal("a cut Configure succeeded")
	}
	if vm, _ := be.VM(id); vm.ConfigureIntent == nil || vm.ConfigureIntent.OperationID != op || vm.Binding != nil {
		t.Fatalf("VM after the cut Configure: %+v", vm)
	}
}

// A SPECULATIVE record (rebuilt after a lost state file) whose domain
// carries a Configure's intent is not adopted IDLE: it becomes that
// Configure's, CONFIGURING with its operation id, cluster, shard metadata
// and domain, with a live deadline and a running history entry, and the
// engine is asked once to end it as the guest tells. A plain domain next
// to it is adopted as before; a later pass changes neither.
func TestPassResumesAConfigureFoundOnTheDomain(t *testing.T) {
	t.Parallel()
	r, eng, be := passFixture(t,
		record.Machine{ID: "cut", State: record.Speculative},
		record.Machine{ID: "plain", State: record.Speculative},
	)
	pl := create(t, be, "cut")
	create(t, be, "plain")
	cutConfigure(t, be, "cut", "op-conf")

	rep := r.Pass(t.Context())
	m, _ := eng.Get("cut")
	if m.State != record.Configuring || m.OpKind != record.OpConfigure || m.OperationID != "op-conf" || m.Cluster != "c" ||
		!maps.Equal(m.ShardMetadata, map[string]string{"k": "v"}) || m.Domain != pl.Domain {
		t.Fatalf("cut: %+v; want CONFIGURING for op-conf, cluster c, on %s", m, pl.Domain)
	}
	if !m.OpDeadline.After(time.Now().Add(50 * time.Second)) {
		t.Errorf("deadline %v: want about a minute (ConfigureTimeout) from now, so the sweep leaves it to its resume", m.OpDeadline)
	}
	h := m.LastTransition()
	if h == nil || h.OperationID != "op-conf" || h.Outcome != "running" || h.From != record.Speculative || !strings.Contains(h.Note, OutcomeConfigureResumed) {
		t.Errorf("history %+v", h)
	}
	if len(eng.resumed) != 1 || eng.resumed[0].ID != "cut" || eng.resumed[0].OperationID != "op-conf" {
		t.Fatalf("resumed %+v; want the cut Configure once", eng.resumed)
	}
	if p, _ := eng.Get("plain"); p.State != record.Idle || rep.Adopted != 1 {
		t.Errorf("plain: %s, adopted %d; want IDLE, one adoption", p.State, rep.Adopted)
	}
	if !r.listed.Covers("zone-a", "") {
		t.Error("zone not marked listed")
	}
	rev := m.Revision
	r.Pass(t.Context())
	if m, _ := eng.Get("cut"); m.Revision != rev || len(eng.resumed) != 1 {
		t.Errorf("a second pass changed the Configure's record (rev %d → %d) or resumed it again (%d)", rev, m.Revision, len(eng.resumed))
	}
}

// A Delete's intent beside a Configure's wins: the Delete is resumed, the
// Configure is not. A record in a stable state (the state file kept) is
// never taken over by an intent on its domain.
func TestPassConfigureIntentYieldsToDeleteAndRecords(t *testing.T) {
	t.Parallel()
	r, eng, be := passFixture(t,
		record.Machine{ID: "both", State: record.Speculative},
		record.Machine{ID: "idle", State: record.Idle},
	)
	create(t, be, "both")
	pl := create(t, be, "idle")
	eng.recs["idle"].Domain = pl.Domain
	cutConfigure(t, be, "both", "op-conf")
	cutConfigure(t, be, "idle", "op-old")
	be.SetFailure(fake.OpDeleteCut, "both", context.Canceled)
	if err := be.Delete(t.Context(), backend.DeleteSpec{MachineID: "both", OperationID: "op-del", Zone: "zone-a"}); err == nil {
		t.Fatal("the cut Delete succeeded")
	}
	be.SetFailure(fake.OpDeleteCut, "both", nil)

	r.Pass(t.Context())
	if m, _ := eng.Get("both"); m.State != record.Speculative || m.OperationID != "op-del" {
		t.Errorf("both: %s op %s; want SPECULATIVE, the Delete's", m.State, m.OperationID)
	}
	if m, _ := eng.Get("idle"); m.State != record.Idle || m.OperationID == "op-old" {
		t.Errorf("idle: %s op %s; want left IDLE", m.State, m.OperationID)
	}
	if len(eng.resumed) != 0 {
		t.Errorf("resumed %+v; want none", eng.resumed)
	}
}

// A backend that cannot ask the guest (no ConfigureProber) keeps the old
// rule: the domain is adopted as it says.
func TestPassWithoutProberAdopts(t *testing.T) {
	t.Parallel()
	r, eng, be := passFixture(t, record.Machine{ID: "cut", State: record.Speculative})
	create(t, be, "cut")
	cutConfigure(t, be, "cut", "op-conf")
	r.can = caps.Of(struct{ backend.Backend }{be})
	r.Pass(t.Context())
	if m, _ := eng.Get("cut"); m.State != record.Idle || len(eng.resumed) != 0 {
		t.Errorf("cut: %s, resumed %d; want IDLE, none", m.State, len(eng.resumed))
	}
}
