package lifecycle

import (
	"fmt"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// TestRefusedNewcomerLeavesNoMark is issue 39's rule: 10,000 invented
// shard ids whose calls on a real machine are refused after the fence
// (here Drain of a SPECULATIVE machine: Aborted) leave no durable mark and
// fill no bound, so the real shard, new to the machine, acts at once and
// after a restart; while the process lives, each invented token's replay
// is still FailedPrecondition (the mark is kept in memory). A shard that
// already holds a mark moves it on a refused call, durably.
func TestRefusedNewcomerLeavesNoMark(t *testing.T) {
	t.Parallel()
	const limit = 8
	cfg := func(c *Config) { c.ShardsPerMachine = limit }
	f := newFixture(t, 2, cfg)
	ctx := t.Context()
	for i := range 10_000 {
		_, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000", Token: tok(fmt.Sprintf("invented-%05d", i), 1, 1)})
		if codeOf(err) != record.CodeAborted {
			t.Fatalf("invented shard %d: %v; want Aborted (out of position)", i, err)
		}
	}
	if n := f.e.fences.ShardsOn("m000"); n != 0 {
		t.Errorf("m000 holds durable marks of %d shards; want none", n)
	}
	if n := storedMarks(f, "m000"); n != 0 {
		t.Errorf("the store holds %d marks of m000; want none", n)
	}
	if _, refused := f.e.ShardLimit(); refused != 0 {
		t.Errorf("%d first contacts refused at the bound; want none", refused)
	}
	// The latest invented token's replay is still fenced while kept.
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok("invented-09999", 1, 1)}); codeOf(err) != record.CodeFenced {
		t.Errorf("replay of a refused newcomer's token: %v; want FailedPrecondition", err)
	}
	// The real shard, new to the machine, is accepted, and its mark is
	// durable and counted.
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok("real", 4, 1)}); err != nil {
		t.Fatalf("real shard's Create: %v", err)
	}
	if n := storedMarks(f, "m000"); n != 1 {
		t.Errorf("the store holds %d marks of m000; want the real shard's", n)
	}
	// A holder's refused call moves its durable mark: Delete of a CREATING
	// or IDLE machine at (4,2) is accepted or refused, either way (4,2) is
	// its mark now, across a restart.
	f.waitState("m000", record.Idle)
	if _, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000", Token: tok("real", 4, 2)}); codeOf(err) != record.CodeAborted {
		t.Fatalf("real shard's Drain of an IDLE machine: %v; want Aborted", err)
	}
	f.e.Close()
	f.start(2, cfg)
	if _, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: "m000", Token: tok("real", 4, 2)}); codeOf(err) != record.CodeFenced {
		t.Errorf("after a restart, the holder's refused token replayed: %v; want FailedPrecondition", err)
	}
	// The invented shards' in-memory marks are gone with the process:
	// nothing of them is left to lock anyone out.
	if _, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000", Token: tok("invented-09999", 1, 1)}); codeOf(err) != record.CodeAborted {
		t.Errorf("after a restart, an invented shard's token: %v; want Aborted", err)
	}
	if _, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: "m000", Token: tok("real", 4, 3)}); err != nil {
		t.Errorf("real shard's Delete after the restart: %v", err)
	}
}

func storedMarks(f *fixture, id string) int {
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	n := 0
	for k := range f.st.marks {
		if k.MachineID == id {
			n++
		}
	}
	return n
}
