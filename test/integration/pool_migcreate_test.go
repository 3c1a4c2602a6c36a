//go:build integration && pool

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// TestPoolMigrateThenCreate is make demo-pool's migration step as a test
// (issue 38 case 8): a zone of two real hosts with room for two 1-vCPU
// machines each holds three; one of them is live-migrated from the full
// host to the other and back, and the moment each MigrateMachine returns
// the books show the machine on its destination only and its room free
// on the source, though reconcile lists both hosts meanwhile (listings
// meet the copy in passage and end after the move). A Create
// sent right after the last migration lands in the room it left and
// reaches IDLE; the next one finds the zone full and is FAILED at once
// with the cause. Before the fix the source kept the migrated machine
// booked until its next listing, and the Create was FAILED with "no host
// fits 1 vCPU ... best host session has 0 vCPU".
func TestPoolMigrateThenCreate(t *testing.T) {
	pe := loadPoolEnv(t)
	// CPU overcommit 2.5/CPUs: 2.5 placeable vCPUs per host, two machines each.
	oc := &overcommit{CPU: 2.5 / float64(nodeCPUs(t, pe)), Memory: 1}
	// Reconcile every 5 s, as make demo-pool does (a later flag wins): a
	// pass then often lists both hosts while the move runs, and the books
	// it leaves stand until the next one.
	p := startPool(t, pe, "it-poolmc", pe.poolHosts(oc), 5, "--reconcile-interval=5s")
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	ids := p.slots(t, 5)
	where := p.createAll(t, ctx, pe, ids[0], ids[1], ids[2])
	count := map[string]int{}
	for _, hd := range where {
		count[hd[0]]++
	}
	full, other := sysHost, otherHost
	if count[otherHost] == 2 {
		full, other = otherHost, sysHost
	}
	if count[full] != 2 || count[other] != 1 {
		t.Fatalf("three Creates spread as %v, want 2 and 1", count)
	}
	var m string // a machine of the full host
	for id, hd := range where {
		if hd[0] == full {
			m = id
		}
	}
	t.Cleanup(func() { cleanupDomain(t, env{URI: pe.uri(other), Pool: pe.Pool}, where[m][1]) })
	// Cleanups run last first: the provider stops before the domains are
	// removed, or its reconcile would start them again.
	t.Cleanup(func() { (&provider{binProc: p.binProc, done: p.done}).stop(t) })

	from, to := full, other
	for round := range 4 { // there and back, twice
		res := p.migrate(t, ctx, m, to)
		if res.GetFromHost() != from || res.GetToHost() != to {
			t.Fatalf("round %d: migrated %s → %s, want %s → %s", round, res.GetFromHost(), res.GetToHost(), from, to)
		}
		p.booksAfterMove(t, round, m, from, to)
		from, to = to, from
	}
	free := to // the last migration's source

	var ack pb.TransitionAck
	if err := p.call(ctx, "Create", &pb.CreateRequest{MachineId: ids[3]}, &ack); err != nil {
		t.Fatalf("Create right after the migration: %v", err)
	}
	got := p.awaitAny(t, ctx, ids[3], pb.MachineState_MACHINE_STATE_IDLE, pb.MachineState_MACHINE_STATE_FAILED)
	if got.GetState() != pb.MachineState_MACHINE_STATE_IDLE {
		t.Fatalf("Create in the room the migration left: %s, last_error %q", got.GetState(), got.GetLastError())
	}
	h, d := placed(t, got)
	t.Cleanup(func() { cleanupDomain(t, env{URI: pe.uri(h), Pool: pe.Pool}, d) })
	if h != free {
		t.Fatalf("Create after the migration went to %s, want %s (the only room)", h, free)
	}

	t0 := time.Now()
	if err := p.call(ctx, "Create", &pb.CreateRequest{MachineId: ids[4]}, &ack); err != nil {
		t.Fatalf("Create in a full zone: %v", err)
	}
	got = p.awaitAny(t, ctx, ids[4], pb.MachineState_MACHINE_STATE_IDLE, pb.MachineState_MACHINE_STATE_FAILED)
	if got.GetState() != pb.MachineState_MACHINE_STATE_FAILED || !strings.Contains(got.GetLastError(), "no host fits 1 vCPU") {
		t.Fatalf("Create in a full zone: %s on %q, last_error %q; want FAILED naming the request", got.GetState(),
			got.GetHost().GetRef(), got.GetLastError())
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("the full zone's Create was FAILED after %s, want at once (no migration in flight)", took)
	}
	for _, id := range ids[:4] {
		p.transition(t, ctx, "Delete", &pb.DeleteRequest{MachineId: id}, pb.MachineState_MACHINE_STATE_SPECULATIVE)
	}
}

// booksAfterMove samples the books of both hosts for two seconds after a
// migration of m from → to returned: each sample must show from with one
// vCPU used and to with two, from the first on.
func (p *poolProvider) booksAfterMove(t *testing.T, round int, m, from, to string) {
	t.Helper()
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		src, dst := p.host(t, from).GetCapacity(), p.host(t, to).GetCapacity()
		if src.GetVcpusUsed() != 1 || dst.GetVcpusUsed() != 2 {
			t.Fatalf("round %d: after migrating %s %s → %s the books show %s %d vCPU used, %s %d; want 1 and 2",
				round, m, from, to, from, src.GetVcpusUsed(), to, dst.GetVcpusUsed())
		}
	}
}
