package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// poolFixture: the fake backend with zone-a of two hosts (room for two
// seed machines each) and zone-b of one host too small for any.
func poolFixture(t *testing.T) (*fixture, *fake.Backend) {
	t.Helper()
	fb := fake.New(fake.Options{Hosts: []fake.Host{
		{Name: "a1", Zone: "zone-a", VCPUs: 4, MemoryMiB: 8192, PoolGiB: 10},
		{Name: "a2", Zone: "zone-a", VCPUs: 4, MemoryMiB: 8192, PoolGiB: 10},
		{Name: "b1", Zone: "zone-b", VCPUs: 2, MemoryMiB: 2048, PoolGiB: 10},
	}})
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend(), wrap: fb}
	f.start(8)
	return f, fb
}

// A Create's placement decision is kept in the machine's history and its
// host in the record and the ref.
func TestCreateRecordsPlacement(t *testing.T) {
	t.Parallel()
	f, _ := poolFixture(t)
	f.toIdle("m000")
	m := f.waitState("m000", record.Idle)
	if m.HostName != "a1" && m.HostName != "a2" {
		t.Fatalf("host name %q", m.HostName)
	}
	if m.Host.Ref != "zone-a/"+m.HostName+"/"+fake.DomainName("m000") {
		t.Fatalf("ref %q", m.Host.Ref)
	}
	h := m.History[len(m.History)-1]
	if h.Kind != record.OpCreate || h.Outcome != "succeeded" || !strings.HasPrefix(h.Note, "spread: host "+m.HostName+" has the most free memory") {
		t.Fatalf("history %+v", h)
	}
	// The second machine goes to the other host (spread), and the record
	// survives in the store with its note.
	f.toIdle("m002")
	if m2 := f.waitState("m002", record.Idle); m2.HostName == m.HostName {
		t.Fatalf("spread put both on %s", m.HostName)
	}
	if st := f.st.stored("m000"); st.HostName != m.HostName || st.History[len(st.History)-1].Note != h.Note {
		t.Fatalf("stored %+v", st)
	}
}

// A full zone ends the Create FAILED at once (not retried as an outage),
// its last_error naming the zone, the request and the best host's room.
func TestCreateNoCapacityFailsFast(t *testing.T) {
	t.Parallel()
	f, fb := poolFixture(t)
	start := time.Now()
	if _, err := f.e.Create(context.Background(), record.CreateRequest{MachineID: "m001"}); err != nil {
		t.Fatal(err)
	}
	m := f.waitState("m001", record.Failed)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("FAILED after %s", took)
	}
	want := "create failed: fake: zone zone-b: no host fits 2 vCPU, 4096 MiB; best host b1 has 2 vCPU, 2048 MiB free after overcommit (1 hosts: 0 down, 0 cordoned)"
	if !strings.HasPrefix(m.LastError, want) {
		t.Fatalf("last_error %q\nwant       %q...", m.LastError, want)
	}
	h := m.History[len(m.History)-1]
	if h.Outcome != "failed" || h.LastError != m.LastError || h.Note != "" {
		t.Fatalf("history %+v", h)
	}
	if fb.Len() != 0 {
		t.Fatalf("a refused Create left %d VMs", fb.Len())
	}
	// A zone whose every host is cordoned is full too.
	if err := fb.SetCordoned("a1", true); err != nil {
		t.Fatal(err)
	}
	if err := fb.SetCordoned("a2", true); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Create(context.Background(), record.CreateRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	if m := f.waitState("m000", record.Failed); !strings.Contains(m.LastError, "no connected, uncordoned host (2 hosts: 0 down, 2 cordoned)") {
		t.Fatalf("last_error %q", m.LastError)
	}
}

// A host that is down does not block its zone: the Create lands on the
// other host, and the down host's machine stays as it is (never FAILED
// by a reconcile while its host cannot be reached).
func TestCreateWithHostDown(t *testing.T) {
	t.Parallel()
	f, fb := poolFixture(t)
	f.toIdle("m000")
	first := f.waitState("m000", record.Idle)
	fb.SetHostDown(first.HostName, true)
	f.toIdle("m002")
	if m := f.waitState("m002", record.Idle); m.HostName == first.HostName {
		t.Fatalf("placed on the down host %s", m.HostName)
	}
	f.e.Reconcile(context.Background())
	if m, _ := f.e.Get(context.Background(), "m000"); m.State != record.Idle {
		t.Fatalf("machine of the down host: %s %q", m.State, m.LastError)
	}
}
