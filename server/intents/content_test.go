package intents

import (
	"bytes"
	"compress/gzip"
	"maps"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Every id round-trips, whatever bytes it holds, and so do negative and
// extreme epochs and sequences (ordinary values by contract).
func TestContentRoundTrip(t *testing.T) {
	t.Parallel()
	c := Content{}.clone()
	for i, id := range []string{"m-1", "m\"q", "m\\b", "<m>&", "m\x00nul", "ü-ünicode", "bad\xffutf8x", ""} {
		c.Marks[record.MarkKey{ShardID: "s" + id, MachineID: id}] = record.Mark{Epoch: -int64(i) << 60, Sequence: int64(i)<<62 - 1}
		c.Marks[record.MarkKey{ShardID: "t", MachineID: id}] = record.Mark{Epoch: 1, Sequence: 2}
	}
	c.Creating["m-1"] = creating("m-1")
	c.Hosts[HostCordons] = []byte(`{"version":1,"cordons":[{"host":"h1","by":"op","since":"2026-12-07T00:00:00Z"}]}`)
	data, err := encode(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decode(data)
	if err != nil {
		t.Fatal(err)
	}
	// Invalid UTF-8 is replaced by encoding/json, as for every other JSON
	// this provider writes; compare with that.
	want := maps.Clone(c.Marks)
	delete(want, record.MarkKey{ShardID: "sbad\xffutf8x", MachineID: "bad\xffutf8x"})
	delete(want, record.MarkKey{ShardID: "t", MachineID: "bad\xffutf8x"})
	want[record.MarkKey{ShardID: "sbad\ufffdutf8x", MachineID: "bad\ufffdutf8x"}] = c.Marks[record.MarkKey{ShardID: "sbad\xffutf8x", MachineID: "bad\xffutf8x"}]
	want[record.MarkKey{ShardID: "t", MachineID: "bad\ufffdutf8x"}] = record.Mark{Epoch: 1, Sequence: 2}
	if !maps.Equal(back.Marks, want) {
		t.Fatalf("marks:\n got %v\nwant %v", back.Marks, want)
	}
	if back.Creating["m-1"].OperationID != "op-m-1" || !bytes.Equal(back.Hosts[HostCordons], c.Hosts[HostCordons]) {
		t.Fatalf("creating or hosts lost: %+v %q", back.Creating, back.Hosts)
	}
}

// What decode cannot read faithfully is an error, never a partial journal.
func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	gz := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write([]byte(s))
		w.Close()
		return b.Bytes()
	}
	for name, data := range map[string][]byte{
		"not gzip":        []byte("{}"),
		"not json":        gz("nope"),
		"other version":   gz(`{"version":2,"creating":[],"marks":{}}`),
		"unknown field":   gz(`{"version":1,"creating":[],"marks":{},"extra":1}`),
		"not creating":    gz(`{"version":1,"creating":[{"id":"m","state":3}],"marks":{}}`),
		"creating, no id": gz(`{"version":1,"creating":[{"state":2}],"marks":{}}`),
		"bad mark":        gz(`{"version":1,"creating":[],"marks":{"m":{"s":[1]}}}`),
	} {
		if _, err := decode(data); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if c, err := decode(nil); err != nil || !c.Empty() {
		t.Fatalf("empty ConfigMap: %v %v", c, err)
	}
}

func FuzzDecode(f *testing.F) {
	data, _ := encode(fleet(3, 2, 1))
	f.Add(data)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decode(b)
		if err != nil {
			return
		}
		// What decodes re-encodes and decodes to the same marks.
		again, err := encode(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := decode(again)
		if err != nil || !maps.Equal(c.Marks, c2.Marks) || len(c.Creating) != len(c2.Creating) {
			t.Fatalf("re-encode: %v", err)
		}
	})
}
