package intents

import (
	"fmt"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// fleet is n seeded slots' worth of journal: every slot with a mark from
// each of shards shards (epochs and sequences as BigFleet's, large), and
// creating of them in CREATING with a full record.
func fleet(n, shards, creating int) Content {
	c := Content{}.clone()
	for i := range n {
		id := fmt.Sprintf("zone-%c-kvm-small-%04d", 'a'+i%4, i)
		for s := range shards {
			c.Marks[record.MarkKey{ShardID: fmt.Sprintf("bigfleet-shard-%02d", s), MachineID: id}] =
				record.Mark{Epoch: 1765000000 + int64(s), Sequence: 1_000_000 + int64(i)*37}
		}
		if i < creating {
			m := record.Machine{ID: id, State: record.Creating, InstanceType: "kvm.small", Zone: "zone-a",
				CapacityType: record.CapacityOnDemand, PricePerHour: 0.05, VCPU: 2, MemoryMiB: 2048,
				Resources: map[string]string{"cpu": "2", "memory": "2Gi"}, Allocatable: map[string]string{"cpu": "2", "memory": "2Gi"},
				OperationID: fmt.Sprintf("op-%032x", i), OpKind: record.OpCreate, StateSince: time.Now(), Revision: uint64(i)}
			for h := range 8 {
				m.History = append(m.History, record.Transition{OperationID: fmt.Sprintf("op-%032x", h), Kind: record.OpCreate,
					From: record.Speculative, To: record.Idle, Started: time.Now(), Ended: time.Now(), Outcome: "succeeded"})
			}
			c.Transitional[id] = m
		}
	}
	return c
}

// The journal of 8000 slots fits its ConfigMap with room to spare: one
// mark per slot, and four shards' marks per slot, with 200 Creates in
// flight. The figures are docs/ha.md's.
func TestSizeAt8000Slots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ shards, creating int }{{1, 0}, {1, 200}, {4, 200}} {
		start := time.Now()
		data, err := encode(fleet(8000, tc.shards, tc.creating))
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		n := size(data)
		t.Logf("8000 slots, %d shard(s) of marks each, %d CREATING: %d bytes (%.0f%% of the bound), encoded in %s",
			tc.shards, tc.creating, n, 100*float64(n)/MaxBytes, took.Round(time.Millisecond))
		if n > MaxBytes/2 {
			t.Errorf("%d bytes: more than half the ConfigMap's bound", n)
		}
		back, err := decode(data)
		if err != nil {
			t.Fatal(err)
		}
		if len(back.Marks) != 8000*tc.shards || len(back.Transitional) != tc.creating {
			t.Fatalf("round trip: %d marks, %d creating", len(back.Marks), len(back.Transitional))
		}
	}
}

// BenchmarkEncode8000 is a whole journal of 8000 marked slots (the first
// write); BenchmarkWrite8000 one write's re-encoding (one bucket).
func BenchmarkEncode8000(b *testing.B) {
	c := fleet(8000, 1, 10)
	for b.Loop() {
		if _, err := encode(c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWrite8000(b *testing.B) {
	c := fleet(8000, 1, 10)
	parts, _ := encode(c)
	dirty := map[int]bool{bucketOf("zone-a-kvm-small-0007"): true}
	for b.Loop() {
		if err := encodeInto(parts, c, dirty); err != nil {
			b.Fatal(err)
		}
	}
}
