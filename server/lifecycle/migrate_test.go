package lifecycle

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func usedOn(t *testing.T, fb *fake.Backend, host string) int {
	t.Helper()
	for _, h := range fb.Hosts(context.Background()) {
		if h.Name == host {
			return h.Capacity.UsedVCPUs
		}
	}
	t.Fatalf("no host %s", host)
	return 0
}

func other(h string) string { return map[string]string{"a1": "a2", "a2": "a1"}[h] }

// A migration changes the host and nothing BigFleet keys on: state,
// cluster, shard metadata, operation id and fence marks stay; the books
// move with the VM; the machine works on its new host.
func TestMigrateKeepsStateAndMovesHost(t *testing.T) {
	t.Parallel()
	f, fb := poolFixture(t)
	ctx := context.Background()
	f.toIdle("m000")
	if _, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: "c1",
		ShardMetadata: map[string]string{"k": "v\x00"}, Token: tok("s1", 3, 7)}); err != nil {
		t.Fatal(err)
	}
	before := f.waitState("m000", record.Configured)
	marks := f.e.Marks()
	res, err := f.e.Migrate(ctx, "m000", "")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := f.e.Get(ctx, "m000")
	if res.From != before.HostName || res.To != other(before.HostName) || m.HostName != res.To {
		t.Fatalf("migrated %s -> %s, record on %s", res.From, res.To, m.HostName)
	}
	if m.Host.Ref != "zone-a/"+res.To+"/"+fake.DomainName("m000") || m.Host.Provider != before.Host.Provider {
		t.Fatalf("ref %+v", m.Host)
	}
	if m.State != record.Configured || m.Cluster != "c1" || !maps.Equal(m.ShardMetadata, before.ShardMetadata) ||
		m.OperationID != before.OperationID || m.OpKind != record.OpConfigure || m.LastError != "" || !m.StateSince.Equal(before.StateSince) {
		t.Fatalf("record changed beyond the host: %+v", m)
	}
	if !maps.Equal(f.e.Marks(), marks) {
		t.Fatalf("marks changed: %v -> %v", marks, f.e.Marks())
	}
	h := m.History[len(m.History)-1]
	if h.Kind != record.OpMigrate || h.Outcome != "succeeded" || h.From != record.Configured || h.To != record.Configured ||
		!strings.HasPrefix(h.Note, "from host "+res.From+" to host "+res.To) {
		t.Fatalf("history %+v", h)
	}
	if st := f.st.stored("m000"); st.HostName != res.To {
		t.Fatalf("stored on %q", st.HostName)
	}
	if usedOn(t, fb, res.From) != 0 || usedOn(t, fb, res.To) != 2 {
		t.Fatalf("books: from %d, to %d", usedOn(t, fb, res.From), usedOn(t, fb, res.To))
	}
	// A Configure retry still answers the same operation; a Drain runs on
	// the new host; reconcile finds nothing to change.
	if ack, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: "c1", Token: tok("s1", 3, 8)}); err != nil || ack.OperationID != before.OperationID {
		t.Fatalf("configure retry: %v %v", ack.OperationID, err)
	}
	if rep := f.e.Reconcile(ctx); rep.Adopted+rep.Vanished != 0 {
		t.Fatalf("reconcile after migrate: %+v", rep)
	}
	if _, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000"}); err != nil {
		t.Fatal(err)
	}
	if d := f.waitState("m000", record.Idle); d.HostName != res.To {
		t.Fatalf("drained on %s", d.HostName)
	}
	// Back by name.
	if res2, err := f.e.Migrate(ctx, "m000", res.From); err != nil || res2.To != res.From {
		t.Fatalf("migrate back: %+v %v", res2, err)
	}
}

func TestMigrateRefusals(t *testing.T) {
	t.Parallel()
	f, _ := poolFixture(t)
	ctx := context.Background()
	f.toIdle("m000")
	m, _ := f.e.Get(ctx, "m000")
	// Fill the other host, so no destination fits.
	f.toIdle("m002")
	f.toIdle("m004")
	f.toIdle("m006")
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m001"}); err != nil {
		t.Fatal(err) // zone-b's host is too small: FAILED
	}
	f.waitState("m001", record.Failed)
	for _, tc := range []struct {
		id, to string
		code   record.Code
		msg    string
	}{
		{"", "", record.CodeInvalid, "id"},
		{"nope", "", record.CodeNotFound, "not found"},
		{"m003", "", record.CodeAborted, "it is SPECULATIVE, only IDLE or CONFIGURED"},
		{"m001", "", record.CodeAborted, "it is FAILED"},
		{"m000", m.HostName, record.CodeInvalid, "already on host"},
		{"m000", "b1", record.CodeNotFound, "no host \"b1\""},
		{"m000", "", record.CodeAborted, "no host fits"},
		{"m000", other(m.HostName), record.CodeAborted, "cannot take 2 vCPU"},
	} {
		_, err := f.e.Migrate(ctx, tc.id, tc.to)
		if codeOf(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Migrate(%q, %q) = %v (code %d), want code %d containing %q", tc.id, tc.to, err, codeOf(err), tc.code, tc.msg)
		}
	}
	if got, _ := f.e.Get(ctx, "m000"); got.State != record.Idle || got.HostName != m.HostName || got.Revision != m.Revision {
		t.Fatalf("refused migrations moved the machine: %+v", got)
	}
}

// While a migration runs, BigFleet's transitions are refused with
// Unavailable (a retry that starts nothing still answers), a second
// migration is Aborted, and reconcile leaves the machine alone.
func TestMigrateHoldsTheMachine(t *testing.T) {
	t.Parallel()
	f, fb := poolFixture(t)
	ctx := context.Background()
	f.toConfigured("m000", "c1")
	fb.SetDelay(fake.OpMigrate, 300*time.Millisecond)
	done := make(chan error, 1)
	go func() { _, err := f.e.Migrate(ctx, "m000", ""); done <- err }()
	for f.e.moves.Refusal("m000") == nil {
		time.Sleep(time.Millisecond)
	}
	if _, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000", Token: tok("s", 1, 1)}); codeOf(err) != record.CodeUnavailable ||
		!strings.Contains(err.Error(), "being live-migrated") {
		t.Fatalf("drain during migration: %v", err)
	}
	if _, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000", Token: tok("s", 1, 1)}); codeOf(err) != record.CodeFenced {
		t.Fatalf("the refused drain's token must still advance the mark: %v", err)
	}
	if _, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: "c1"}); err != nil {
		t.Fatalf("configure retry during migration: %v", err)
	}
	if _, err := f.e.Migrate(ctx, "m000", ""); codeOf(err) != record.CodeAborted || !strings.Contains(err.Error(), "already being migrated") {
		t.Fatalf("second migration: %v", err)
	}
	fb.Vanish("m000") // reconcile must not judge it while it moves
	if rep := f.e.Reconcile(ctx); rep.Vanished != 0 {
		t.Fatalf("reconcile judged a migrating machine: %+v", rep)
	}
	if m, _ := f.e.Get(ctx, "m000"); m.State != record.Configured {
		t.Fatalf("state during migration %s", m.State)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000", Token: tok("s", 1, 2)}); err != nil {
		t.Fatalf("drain after the migration: %v", err)
	}
}

// A migration that fails leaves the machine where and as it was (never
// FAILED), says why in last_error and the history, and frees the
// destination's booking; the next one that succeeds clears the note.
func TestMigrateFailureKeepsState(t *testing.T) {
	t.Parallel()
	f, fb := poolFixture(t)
	ctx := context.Background()
	f.toConfigured("m000", "c1")
	before, _ := f.e.Get(ctx, "m000")
	fb.SetFailure(fake.OpMigrate, "m000", errors.New("job aborted: storage copy failed"))
	_, err := f.e.Migrate(ctx, "m000", "")
	if codeOf(err) != record.CodeUnavailable || !strings.Contains(err.Error(), "storage copy failed") {
		t.Fatalf("err = %v", err)
	}
	m, _ := f.e.Get(ctx, "m000")
	if m.State != record.Configured || m.HostName != before.HostName || m.Host != before.Host || m.Cluster != "c1" ||
		m.OperationID != before.OperationID {
		t.Fatalf("record after a failed migration: %+v", m)
	}
	want := "migrate failed: job aborted: storage copy failed; the VM still runs on host " + before.HostName
	if m.LastError != want {
		t.Fatalf("last_error %q, want %q", m.LastError, want)
	}
	if h := m.History[len(m.History)-1]; h.Kind != record.OpMigrate || h.Outcome != "failed" || h.LastError != want {
		t.Fatalf("history %+v", h)
	}
	if n := usedOn(t, fb, other(before.HostName)); n != 0 {
		t.Fatalf("destination still booked: %d vCPU", n)
	}
	if vm, _ := fb.VM("m000"); vm.Placement.Host != before.HostName || !vm.Running {
		t.Fatalf("vm %+v", vm)
	}
	fb.ClearFailures()
	if _, err := f.e.Migrate(ctx, "m000", ""); err != nil {
		t.Fatal(err)
	}
	if m, _ := f.e.Get(ctx, "m000"); m.LastError != "" || m.HostName == before.HostName {
		t.Fatalf("after a good migration: host %s, last_error %q", m.HostName, m.LastError)
	}
}

// A migration libvirt finished but the provider never recorded (it
// stopped first) is found by reconcile: the running copy is the machine,
// its host is recorded, nothing else changes.
func TestReconcileRecordsUnrecordedMigration(t *testing.T) {
	t.Parallel()
	f, fb := poolFixture(t)
	ctx := context.Background()
	f.toConfigured("m000", "c1")
	before, _ := f.e.Get(ctx, "m000")
	if _, err := fb.Migrate(ctx, backendSpec(before)); err != nil { // behind the engine's back
		t.Fatal(err)
	}
	f.e.Reconcile(ctx)
	m, _ := f.e.Get(ctx, "m000")
	if m.HostName != other(before.HostName) || m.State != record.Configured || m.Cluster != "c1" || m.OperationID != before.OperationID ||
		m.Host.Ref != "zone-a/"+m.HostName+"/"+m.Domain {
		t.Fatalf("after reconcile: %+v", m)
	}
	if h := m.History[len(m.History)-1]; h.Kind != record.OpReconcile || h.Outcome != "relocated" {
		t.Fatalf("history %+v", h)
	}
	rev := m.Revision
	f.e.Reconcile(ctx)
	if m, _ := f.e.Get(ctx, "m000"); m.Revision != rev {
		t.Fatal("a second reconcile changed the record again")
	}
}

func backendSpec(m record.Machine) backend.MigrateSpec {
	return backend.MigrateSpec{MachineID: m.ID, Placement: m.Placement(), VCPU: m.VCPU, MemoryMiB: m.MemoryMiB}
}

// guard is a MoveGuard under the test's control.
type guard struct {
	refuse error
	held   chan context.CancelCauseFunc
}

func (g *guard) Hold(ctx context.Context) (context.Context, func(), error) {
	if g.refuse != nil {
		return nil, nil, g.refuse
	}
	ctx, cancel := context.WithCancelCause(ctx)
	g.held <- cancel
	return ctx, func() { cancel(context.Canceled) }, nil
}

// Under --leader-elect a migration runs only while the lease's guard
// holds: refused, nothing is tried or recorded (Unavailable, the cause
// named); ended mid-way, the migration is aborted, the VM stays on its
// source and last_error names the guard's cause.
func TestMigrateUnderTheLeaseGuard(t *testing.T) {
	t.Parallel()
	f, fb := poolFixture(t)
	ctx := context.Background()
	f.toConfigured("m000", "c1")
	before, _ := f.e.Get(ctx, "m000")
	g := &guard{refuse: errors.New("renewal late"), held: make(chan context.CancelCauseFunc, 1)}
	f.e.cfg.MoveGuard = g
	if _, err := f.e.Migrate(ctx, "m000", ""); codeOf(err) != record.CodeUnavailable || !strings.Contains(err.Error(), "renewal late") {
		t.Fatalf("refused by the guard: %v; want Unavailable naming the cause", err)
	}
	if n := fb.Calls(fake.OpMigrate); n != 0 {
		t.Fatalf("a refused migration reached the backend %d times", n)
	}
	if m, _ := f.e.Get(ctx, "m000"); len(m.History) != len(before.History) || m.LastError != "" || f.e.moves.Refusal("m000") != nil {
		t.Fatalf("a refused migration left a trace: history %d→%d, last_error %q, held %v", len(before.History), len(m.History), m.LastError, f.e.moves.Refusal("m000"))
	}
	g.refuse = nil
	fb.SetDelay(fake.OpMigrate, time.Minute)
	done := make(chan error, 1)
	go func() { _, err := f.e.Migrate(ctx, "m000", ""); done <- err }()
	abort := <-g.held
	abort(errors.New("lease renewal late"))
	select {
	case err := <-done:
		if codeOf(err) != record.CodeUnavailable || !strings.Contains(err.Error(), "lease renewal late") {
			t.Fatalf("aborted by the guard: %v; want Unavailable naming the cause", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the guard's abort did not end the migration")
	}
	m, _ := f.e.Get(ctx, "m000")
	if m.HostName != before.HostName || m.State != record.Configured || !strings.Contains(m.LastError, "lease renewal late") {
		t.Fatalf("after the abort: host %s (was %s), state %s, last_error %q", m.HostName, before.HostName, m.State, m.LastError)
	}
	if vm, _ := fb.VM("m000"); vm.Placement.Host != before.HostName {
		t.Fatalf("vm moved to %s", vm.Placement.Host)
	}
}
