package intents

import (
	"bytes"
	"compress/gzip"
	"maps"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Every id round-trips, whatever characters it holds (ids are proto
// strings: valid UTF-8), and so do negative and extreme epochs and
// sequences (ordinary values by contract).
func TestContentRoundTrip(t *testing.T) {
	t.Parallel()
	c := Content{}.clone()
	for i, id := range []string{"m-1", "m\"q", "m\\b", "<m>&", "m\x00nul", "ü-ünicode", ""} {
		c.Marks[record.MarkKey{ShardID: "s" + id, MachineID: id}] = record.Mark{Epoch: -int64(i) << 60, Sequence: int64(i)<<62 - 1}
		c.Marks[record.MarkKey{ShardID: "t", MachineID: id}] = record.Mark{Epoch: 1, Sequence: 2}
	}
	c.Transitional["m-1"] = creating("m-1")
	c.Hosts[HostCordons] = []byte(`{"version":1,"cordons":[{"host":"h1","by":"op","since":"2026-12-07T00:00:00Z"}]}`)
	data, err := encode(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if want := c.Marks; !maps.Equal(back.Marks, want) {
		t.Fatalf("marks:\n got %v\nwant %v", back.Marks, want)
	}
	if back.Transitional["m-1"].OperationID != "op-m-1" || !bytes.Equal(back.Hosts[HostCordons], c.Hosts[HostCordons]) {
		t.Fatalf("creating or hosts lost: %+v %q", back.Transitional, back.Hosts)
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
	ok := gz(`{"version":1,"transitional":[]}`)
	for name, parts := range map[string]map[string][]byte{
		"not gzip":         {Key: []byte("{}")},
		"not json":         {Key: gz("nope")},
		"other version":    {Key: gz(`{"version":2,"transitional":[]}`)},
		"unknown field":    {Key: gz(`{"version":1,"transitional":[],"extra":1}`)},
		"not transitional": {Key: gz(`{"version":1,"transitional":[{"id":"m","state":3}]}`)},
		"no id":            {Key: gz(`{"version":1,"transitional":[{"state":2}]}`)},
		"ended in flight":  {Key: gz(`{"version":1,"transitional":[],"ended":[{"id":"m","state":2}]}`)},
		"ended, no id":     {Key: gz(`{"version":1,"transitional":[],"ended":[{"state":3}]}`)},
		"marks, no main":   {bucketKey(bucketOf("m")): gz(`{"m":{"s":[1,2]}}`)},
		"bad mark":         {Key: ok, bucketKey(bucketOf("m")): gz(`{"m":{"s":[1]}}`)},
		"wrong bucket":     {Key: ok, bucketKey((bucketOf("m") + 1) % MarkBuckets): gz(`{"m":{"s":[1,2]}}`)},
		"bucket not gzip":  {Key: ok, bucketKey(bucketOf("m")): []byte(`{"m":{"s":[1,2]}}`)},
		"unknown key":      {Key: ok, "other": gz(`{}`)},
	} {
		if _, err := decode(parts); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if c, err := decode(nil); err != nil || !c.Empty() {
		t.Fatalf("empty ConfigMap: %v %v", c, err)
	}
}

func FuzzDecode(f *testing.F) {
	parts, _ := encode(fleet(3, 2, 1))
	bucket := bucketOf("zone-a-kvm-small-0000")
	f.Add(parts[Key], parts[bucketKey(bucket)])
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, main, marks []byte) {
		c, err := decode(map[string][]byte{Key: main, bucketKey(bucket): marks})
		if err != nil {
			return
		}
		// What decodes re-encodes and decodes to the same marks.
		again, err := encode(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := decode(again)
		if err != nil || !maps.Equal(c.Marks, c2.Marks) || len(c.Transitional) != len(c2.Transitional) {
			t.Fatalf("re-encode: %v", err)
		}
	})
}
