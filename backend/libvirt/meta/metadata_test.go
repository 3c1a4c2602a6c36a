package meta

import (
	"maps"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

func TestMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []Metadata{
		{Provider: "p", MachineID: "m"},
		{Provider: "p", MachineID: "m", OperationID: "op-1", ClusterID: "c1",
			ShardMetadata: map[string]string{"k": "v", "empty": "", "": "empty key"}},
		{Provider: "p <&> \"q\"", MachineID: "m\x00\x01\x1f", OperationID: " lead", ClusterID: "trail ",
			ShardMetadata: map[string]string{"ctl\r\n\t": "a\rb", "üñí©ødé 🚀": "日本語", "bad\xffutf8": "\xfe", "x": "]]>"}},
		{Provider: "p", MachineID: "m", ClusterID: "c", Marks: map[string]backend.FenceMark{
			"shard-a": {Epoch: 5, Sequence: 1}, "s\x00\n ": {Epoch: 0, Sequence: 0},
			"max": {Epoch: 1<<63 - 1, Sequence: 1<<63 - 1}}},
	}
	for _, m := range tests {
		for _, ns := range []bool{true, false} {
			s, err := m.Marshal(ns)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(s)
			if err != nil {
				t.Fatalf("decode %s: %v", s, err)
			}
			if !sameMetadata(got, m) {
				t.Fatalf("round trip:\n got %#v\nwant %#v\n xml %s", got, m, s)
			}
		}
	}
}

func TestMetadataReadable(t *testing.T) {
	t.Parallel()
	s, _ := Metadata{Provider: "prov", MachineID: "m-1", ClusterID: "c", ShardMetadata: map[string]string{"zone": "a"}}.Marshal(true)
	for _, want := range []string{`xmlns="` + NS + `"`, "<provider>prov</provider>", "<machine>m-1</machine>", "<cluster>c</cluster>"} {
		if !strings.Contains(s, want) {
			t.Fatalf("plain values not stored readably: %s", s)
		}
	}
}

func TestDecodeMetadataStrict(t *testing.T) {
	t.Parallel()
	bad := []string{
		``,
		`<other xmlns="` + NS + `"><provider>p</provider><machine>m</machine></other>`,
		`<instance xmlns="https://elsewhere/"><provider>p</provider><machine>m</machine></instance>`,
		`<instance><provider>p</provider></instance>`,
		`<instance><provider encoding="rot13">p</provider><machine>m</machine></instance>`,
		`<instance><provider encoding="base64">!!!</provider><machine>m</machine></instance>`,
		`<instance><provider>p</provider><machine>m</machine><shard-metadata><entry><key>k</key><value>1</value></entry><entry><key>k</key><value>2</value></entry></shard-metadata></instance>`,
		// Fence marks: damaged ones never pass for a (lower) mark.
		marksXML(`<mark><shard>s</shard><epoch>5</epoch></mark>`),
		marksXML(`<mark><shard>s</shard><sequence>5</sequence></mark>`),
		marksXML(`<mark><epoch>5</epoch><sequence>1</sequence></mark>`),
		marksXML(`<mark><shard>s</shard><epoch>five</epoch><sequence>1</sequence></mark>`),
		marksXML(`<mark><shard>s</shard><epoch>9223372036854775808</epoch><sequence>1</sequence></mark>`),
		marksXML(`<mark><shard encoding="base64">!!</shard><epoch>1</epoch><sequence>1</sequence></mark>`),
		marksXML(`<mark><shard>s</shard><epoch>1</epoch><sequence>1</sequence></mark><mark><shard>s</shard><epoch>2</epoch><sequence>0</sequence></mark>`),
	}
	for _, s := range bad {
		if m, err := Decode(s); err == nil {
			t.Errorf("DecodeMetadata(%q) = %#v, want error", s, m)
		}
	}
	// libvirt hands the element back prefixed and indented.
	m, err := Decode("<bigfleet:instance xmlns:bigfleet=\"" + NS + "\">\n  <bigfleet:provider>p</bigfleet:provider>\n  <machine>m</machine>\n</bigfleet:instance>")
	if err != nil || m.Provider != "p" || m.MachineID != "m" {
		t.Fatalf("prefixed form: %#v, %v", m, err)
	}
}

func marksXML(marks string) string {
	return `<instance><provider>p</provider><machine>m</machine><fence-marks>` + marks + `</fence-marks></instance>`
}

func sameMetadata(a, b Metadata) bool {
	return a.Provider == b.Provider && a.MachineID == b.MachineID && a.OperationID == b.OperationID &&
		a.ClusterID == b.ClusterID && maps.Equal(a.ShardMetadata, b.ShardMetadata) &&
		(len(a.ShardMetadata) == 0) == (len(b.ShardMetadata) == 0) && maps.Equal(a.Marks, b.Marks) &&
		a.Delete.OperationID == b.Delete.OperationID && a.Delete.Since.Equal(b.Delete.Since) &&
		a.Configure.OperationID == b.Configure.OperationID && a.Configure.ClusterID == b.Configure.ClusterID &&
		maps.Equal(a.Configure.ShardMetadata, b.Configure.ShardMetadata) && a.Configure.Since.Equal(b.Configure.Since) &&
		a.Term == b.Term
}

// TestMetadataMarksDecoded: the marks come back from the form libvirt
// returns (prefixed, indented), and a domain written before marks existed
// decodes with none.
func TestMetadataMarksDecoded(t *testing.T) {
	t.Parallel()
	m, err := Decode("<bigfleet:instance xmlns:bigfleet=\"" + NS + "\">\n  <bigfleet:provider>p</bigfleet:provider>\n  <bigfleet:machine>m</bigfleet:machine>\n" +
		"  <bigfleet:fence-marks>\n    <bigfleet:mark>\n      <bigfleet:shard>s-1</bigfleet:shard>\n      <bigfleet:epoch>5</bigfleet:epoch>\n      <bigfleet:sequence>7</bigfleet:sequence>\n    </bigfleet:mark>\n  </bigfleet:fence-marks>\n</bigfleet:instance>")
	if err != nil || !maps.Equal(m.Marks, map[string]backend.FenceMark{"s-1": {Epoch: 5, Sequence: 7}}) {
		t.Fatalf("prefixed marks: %#v, %v", m.Marks, err)
	}
	old, err := Decode(`<instance><provider>p</provider><machine>m</machine><cluster>c</cluster></instance>`)
	if err != nil || old.Marks != nil {
		t.Fatalf("metadata without marks: %#v, %v", old, err)
	}
}

func TestMergeMarks(t *testing.T) {
	t.Parallel()
	type fm = backend.FenceMark
	a := map[string]fm{"s1": {Epoch: 5, Sequence: 1}, "s2": {Epoch: 2, Sequence: 9}, "only-a": {Epoch: 1}}
	b := map[string]fm{"s1": {Epoch: 4, Sequence: 99}, "s2": {Epoch: 2, Sequence: 10}, "only-b": {Sequence: 3}}
	want := map[string]fm{"s1": {Epoch: 5, Sequence: 1}, "s2": {Epoch: 2, Sequence: 10}, "only-a": {Epoch: 1}, "only-b": {Sequence: 3}}
	for _, got := range []map[string]fm{MergeMarks(a, b), MergeMarks(b, a)} {
		if !maps.Equal(got, want) {
			t.Fatalf("MergeMarks = %v, want %v", got, want)
		}
	}
	if MergeMarks(nil, map[string]fm{}) != nil {
		t.Fatal("merge of nothing is not nil")
	}
	if got := MergeMarks(nil, a); !maps.Equal(got, a) {
		t.Fatalf("MergeMarks(nil, a) = %v", got)
	}
}

// FuzzDecodeMetadata: any input decodes or fails cleanly, and whatever
// decodes survives a re-encode unchanged.
func FuzzDecodeMetadata(f *testing.F) {
	f.Add(`<instance xmlns="` + NS + `"><provider>p</provider><machine>m</machine></instance>`)
	f.Add(`<instance><provider encoding="base64">cA==</provider><machine>m</machine><cluster>c</cluster><shard-metadata><entry><key>k</key><value encoding="base64">AAE=</value></entry></shard-metadata></instance>`)
	f.Add(`<instance><provider>`)
	f.Add(`<instance><provider>p</provider><machine>m</machine><delete-intent since="2026-12-05T10:11:12.5+02:00"><operation>op</operation></delete-intent></instance>`)
	f.Add(`<instance><provider>p</provider><machine>m</machine><leader-term lease="u-1">3</leader-term></instance>`)
	f.Add(`<instance><provider>p</provider><machine>m</machine><configure-intent since="2026-12-05T10:11:12Z"><operation>op</operation><cluster encoding="base64">AAE=</cluster><shard-metadata><entry><key>k</key><value>v</value></entry></shard-metadata></configure-intent></instance>`)
	f.Add(marksXML(`<mark><shard>s</shard><epoch>5</epoch><sequence>1</sequence></mark><mark><shard encoding="base64">AA==</shard><epoch>0</epoch><sequence>9223372036854775807</sequence></mark>`))
	f.Add(marksXML(`<mark><shard>s</shard><epoch>-5</epoch><sequence>1</sequence></mark>`))
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Decode(s)
		if err != nil {
			return
		}
		if m.Provider == "" || m.MachineID == "" {
			t.Fatalf("accepted metadata without owner: %#v", m)
		}
		for k, mk := range m.Marks {
			if k == "" {
				t.Fatalf("accepted a damaged fence mark %q: %+v", k, mk)
			}
		}
		out, err := m.Marshal(true)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(out)
		if err != nil || !sameMetadata(again, m) {
			t.Fatalf("re-encode changed it: %#v -> %s -> %#v (%v)", m, out, again, err)
		}
	})
}

// FuzzMetadataRoundTrip: every value a proto string (or any byte string)
// may hold comes back byte for byte.
func FuzzMetadataRoundTrip(f *testing.F) {
	f.Add("p", "m", "op", "c", "k", "v", "s", int64(5), int64(1))
	f.Add("p", "m\x00", "", "", "", "\r\n", "\x00 ", int64(0), int64(1<<63-1))
	f.Fuzz(func(t *testing.T, p, m, op, c, k, v, shard string, epoch, seq int64) {
		if p == "" || m == "" {
			return
		}
		in := Metadata{Provider: p, MachineID: m, OperationID: op, ClusterID: c, ShardMetadata: map[string]string{k: v}}
		if shard != "" && epoch >= 0 && seq >= 0 {
			in.Marks = map[string]backend.FenceMark{shard: {Epoch: epoch, Sequence: seq}}
		}
		if op != "" && c != "" {
			in.Configure = ConfigureIntent{OperationID: op, ClusterID: c, ShardMetadata: map[string]string{v: k}}
		}
		s, err := in.Marshal(false)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(s)
		if err != nil {
			t.Fatalf("decode own output %q: %v", s, err)
		}
		if !sameMetadata(got, in) {
			t.Fatalf("got %#v want %#v", got, in)
		}
		if strings.Contains(s, "\x00") {
			t.Fatal("NUL in XML")
		}
	})
}
