package lifecycle

import (
	"context"
	"reflect"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Records share their history with the versions edited from them (edit);
// a published record must still never change. Churn one machine past the
// history limit, keeping every version it published and a deep copy of
// each taken at the time, then check that none of them moved.
func TestPublishedHistoryNeverChanges(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	type kept struct {
		shared *record.Machine
		copy   record.Machine
	}
	var seen []kept
	keep := func() {
		m, err := f.e.GetShared(ctx, "m000")
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, kept{m, m.Clone()})
	}
	for range record.HistoryLimit {
		if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000"}); err != nil {
			t.Fatal(err)
		}
		keep() // CREATING: its last entry is about to be finished
		f.waitState("m000", record.Idle)
		keep()
		if _, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: "m000"}); err != nil {
			t.Fatal(err)
		}
		keep()
		f.waitState("m000", record.Speculative)
		keep()
	}
	for i, k := range seen {
		if !reflect.DeepEqual(k.shared.History, k.copy.History) {
			t.Fatalf("published version %d's history changed after it was published:\nnow  %+v\nthen %+v", i, k.shared.History, k.copy.History)
		}
	}
	last := seen[len(seen)-1].copy.History
	if len(last) != record.HistoryLimit {
		t.Fatalf("history holds %d entries after %d transitions, want the limit %d", len(last), 2*record.HistoryLimit, record.HistoryLimit)
	}
	if h := last[len(last)-1]; h.Kind != record.OpDelete || h.Outcome != "succeeded" {
		t.Fatalf("newest entry %+v, want the last Delete, succeeded", h)
	}
	if h := last[0]; h.Kind != record.OpCreate {
		t.Fatalf("oldest kept entry %+v, want a Create (the oldest were dropped in order)", h)
	}
}

func TestAppendHistoryNeverWritesIntoASharedArray(t *testing.T) {
	base := make([]record.Transition, 3, 8) // spare capacity another version could own
	shared := base[:2]
	_ = record.AppendHistory(shared, record.Transition{OperationID: "new"})
	if base[2].OperationID != "" {
		t.Fatal("appendHistory wrote into the spare capacity of a shared array")
	}
	full := make([]record.Transition, record.HistoryLimit)
	for i := range full {
		full[i].OperationID = string(rune('a' + i))
	}
	out := record.AppendHistory(full, record.Transition{OperationID: "z"})
	if len(out) != record.HistoryLimit || out[0].OperationID != "b" || out[record.HistoryLimit-1].OperationID != "z" {
		t.Fatalf("full history after append: len %d, first %q, last %q", len(out), out[0].OperationID, out[len(out)-1].OperationID)
	}
	if full[0].OperationID != "a" {
		t.Fatal("appendHistory changed the full history it was given")
	}
}
