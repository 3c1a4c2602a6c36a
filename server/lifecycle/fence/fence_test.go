package fence

import (
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

// The one rule: (epoch, sequence) strictly newer, lexicographically, with
// no arithmetic that could overflow at the int64 extremes.
func TestNewerThanMark(t *testing.T) {
	t.Parallel()
	const max, min = math.MaxInt64, math.MinInt64
	cases := []struct {
		mark  Mark
		epoch int64
		seq   int64
		newer bool
		why   string
	}{
		{Mark{Epoch: 2, Sequence: 5}, 2, 6, true, "same epoch, next sequence"},
		{Mark{Epoch: 2, Sequence: 5}, 2, 5, false, "the mark itself (a replay)"},
		{Mark{Epoch: 2, Sequence: 5}, 2, 4, false, "same epoch, older sequence"},
		{Mark{Epoch: 2, Sequence: 5}, 3, min, true, "a newer epoch passes whatever its sequence"},
		{Mark{Epoch: 2, Sequence: 5}, 1, max, false, "an older epoch fails whatever its sequence"},
		{Mark{Epoch: max, Sequence: max}, max, max, false, "nothing is newer than the top"},
		{Mark{Epoch: max, Sequence: max - 1}, max, max, true, "the top passes the one below it"},
		{Mark{Epoch: min, Sequence: min}, min, min + 1, true, "negative parts are ordinary values"},
		{Mark{}, 0, 0, false, "the zero token does not pass the zero mark"},
		{Mark{}, 0, -1, false, "negative sequence under a zero mark"},
	}
	for _, c := range cases {
		if got := NewerThanMark(c.mark, c.epoch, c.seq); got != c.newer {
			t.Errorf("%s: NewerThanMark(%+v, %d, %d) = %v", c.why, c.mark, c.epoch, c.seq, got)
		}
	}
}

// The rule is a strict total order: of two different tokens exactly one
// is newer than the other, and no token is newer than itself.
func TestNewerThanMarkIsATotalOrder(t *testing.T) {
	t.Parallel()
	vals := []int64{math.MinInt64, -1, 0, 1, 7, math.MaxInt64}
	for _, e1 := range vals {
		for _, s1 := range vals {
			for _, e2 := range vals {
				for _, s2 := range vals {
					ab := NewerThanMark(Mark{Epoch: e2, Sequence: s2}, e1, s1)
					ba := NewerThanMark(Mark{Epoch: e1, Sequence: s1}, e2, s2)
					same := e1 == e2 && s1 == s2
					if same && (ab || ba) || !same && ab == ba {
						t.Fatalf("(%d,%d) vs (%d,%d): newer %v / %v", e1, s1, e2, s2, ab, ba)
					}
				}
			}
		}
	}
}

func TestTableIndexesByMachine(t *testing.T) {
	t.Parallel()
	tb := NewTable(map[MarkKey]Mark{
		{ShardID: "s1", MachineID: "m1"}: {Epoch: 1, Sequence: 1},
		{ShardID: "s2", MachineID: "m1"}: {Epoch: 2, Sequence: 3},
		{ShardID: "s1", MachineID: "m2"}: {Epoch: 5, Sequence: 0},
	})
	if n := tb.ShardsOn("m1"); n != 2 {
		t.Errorf("ShardsOn(m1) = %d, want 2", n)
	}
	tb.Set(MarkKey{ShardID: "s2", MachineID: "m1"}, Mark{Epoch: 2, Sequence: 4}) // raising a mark adds no shard
	tb.Set(MarkKey{ShardID: "s3", MachineID: "m1"}, Mark{Epoch: 1, Sequence: 9})
	if n := tb.ShardsOn("m1"); n != 3 {
		t.Errorf("after raising s2 and adding s3: ShardsOn(m1) = %d, want 3", n)
	}
	if m, ok := tb.Get(MarkKey{ShardID: "s2", MachineID: "m1"}); !ok || m != (Mark{Epoch: 2, Sequence: 4}) {
		t.Errorf("Get(s2/m1) = %+v %v", m, ok)
	}
	want := map[string]backend.FenceMark{"s1": {Epoch: 1, Sequence: 1}, "s2": {Epoch: 2, Sequence: 4}, "s3": {Epoch: 1, Sequence: 9}}
	if got := tb.ForMachine("m1"); !reflect.DeepEqual(got, want) {
		t.Errorf("ForMachine(m1) = %v, want %v", got, want)
	}
	if got := tb.ForMachine("none"); got != nil {
		t.Errorf("ForMachine of a machine without marks = %v, want nil", got)
	}
	c := tb.Clone()
	c[MarkKey{ShardID: "x", MachineID: "m9"}] = Mark{}
	if tb.ShardsOn("m9") != 0 {
		t.Error("Clone shares the table's map")
	}
}

func TestTableBusiestAndTakeIf(t *testing.T) {
	t.Parallel()
	marks := map[MarkKey]Mark{}
	for i, id := range []string{"a", "b", "b", "c", "c", "c", "d", "d", "d"} {
		marks[MarkKey{ShardID: fmt.Sprint("s", i), MachineID: id}] = Mark{Epoch: 1}
	}
	tb := NewTable(marks)
	got := tb.Busiest(3, func(id string) bool { return id != "d" })
	want := []ShardCount{{"c", 3}, {"b", 2}, {"a", 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Busiest(3, not d) = %v, want %v (most first, d left out)", got, want)
	}
	if got := tb.Busiest(2, func(string) bool { return true }); !reflect.DeepEqual(got, []ShardCount{{"c", 3}, {"d", 3}}) {
		t.Errorf("Busiest(2) = %v: ties go by machine id", got)
	}
	taken := tb.TakeIf(func(k MarkKey) bool { return k.MachineID == "c" || k.ShardID == "s1" })
	if len(taken) != 4 {
		t.Errorf("TakeIf took %d marks, want 4 (c's three and s1/b)", len(taken))
	}
	if tb.ShardsOn("c") != 0 || tb.ShardsOn("b") != 1 || tb.ForMachine("c") != nil {
		t.Errorf("after TakeIf: c has %d shards, b %d; the index must follow the marks", tb.ShardsOn("c"), tb.ShardsOn("b"))
	}
	if _, ok := tb.Get(MarkKey{ShardID: "s1", MachineID: "b"}); ok {
		t.Error("a taken mark is still there")
	}
}

// Unknown keeps the most recently used marks up to its limit: a Get
// counts as a use, and the oldest goes first.
func TestUnknownEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	u := NewUnknown(2)
	k := func(id string) MarkKey { return MarkKey{ShardID: "s", MachineID: id} }
	u.Put(k("a"), Mark{Epoch: 1})
	u.Put(k("b"), Mark{Epoch: 2})
	if _, ok := u.Get(k("a")); !ok { // a is now the most recent
		t.Fatal("a lost under the limit")
	}
	u.Put(k("c"), Mark{Epoch: 3})
	if _, ok := u.Get(k("b")); ok {
		t.Error("b, the least recently used, was kept over the limit")
	}
	if m, ok := u.Get(k("a")); !ok || m.Epoch != 1 {
		t.Errorf("a = %+v %v, want kept", m, ok)
	}
	u.Put(k("a"), Mark{Epoch: 9}) // an update is not a new entry
	if m, _ := u.Get(k("a")); m.Epoch != 9 || u.Len() != 2 {
		t.Errorf("after updating a: %+v, len %d", m, u.Len())
	}
	if NewUnknown(0).limit != DefaultUnknownMarkLimit {
		t.Error("a zero limit is not the default")
	}
}
