package lifecycle

import (
	"fmt"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/fence"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// TestShardsPerMachineBound: 10,000 invented shard ids aimed at one real
// machine leave at most the bound of marks (durable and in memory), the
// rest are refused with ResourceExhausted and counted, the shards that
// already hold marks keep working, and other machines are not affected.
func TestShardsPerMachineBound(t *testing.T) {
	t.Parallel()
	const limit = 8
	f := newFixture(t, 2, func(c *Config) { c.ShardsPerMachine = limit })
	ctx := t.Context()
	for i := range 10_000 {
		_, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok(fmt.Sprintf("invented-%05d", i), 1, 1)})
		switch c := codeOf(err); {
		case i < limit && err != nil && c != record.CodeAborted:
			t.Fatalf("shard %d of %d refused: %v", i, limit, err)
		case i >= limit && c != record.CodeExhausted:
			t.Fatalf("shard %d past the limit: %v; want ResourceExhausted", i, err)
		}
	}
	if n := f.e.fences.ShardsOn("m000"); n != limit {
		t.Errorf("m000 holds marks of %d shards; want %d", n, limit)
	}
	stored := 0
	f.st.mu.Lock()
	for k := range f.st.marks {
		if k.MachineID == "m000" {
			stored++
		}
	}
	f.st.mu.Unlock()
	if stored != limit {
		t.Errorf("store holds %d marks of m000; want %d", stored, limit)
	}
	if l, refused := f.e.ShardLimit(); l != limit || refused != 10_000-limit {
		t.Errorf("ShardLimit = %d, %d; want %d, %d", l, refused, limit, 10_000-limit)
	}
	// A shard that already holds a mark is fenced and accepted as before.
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok("invented-00000", 1, 1)}); codeOf(err) != record.CodeFenced {
		t.Errorf("stale token of a shard with a mark: %v; want fenced", err)
	}
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok("invented-00000", 1, 2)}); err != nil && codeOf(err) != record.CodeAborted {
		t.Errorf("newer token of a shard with a mark: %v", err)
	}
	// The bound is per machine.
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m001", Token: tok("invented-09999", 1, 1)}); err != nil {
		t.Errorf("a shard refused on m000 is refused on m001 too: %v", err)
	}
	if got := f.e.BusiestMachines(5, func(string) bool { return true }); len(got) != 2 ||
		got[0] != (fence.ShardCount{MachineID: "m000", Shards: limit}) || got[1] != (fence.ShardCount{MachineID: "m001", Shards: 1}) {
		t.Errorf("BusiestMachines = %+v", got)
	}
}
