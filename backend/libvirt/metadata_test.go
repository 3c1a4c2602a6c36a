package libvirt

import (
	"maps"
	"strings"
	"testing"
)

func TestMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []Metadata{
		{Provider: "p", MachineID: "m"},
		{Provider: "p", MachineID: "m", OperationID: "op-1", ClusterID: "c1",
			ShardMetadata: map[string]string{"k": "v", "empty": "", "": "empty key"}},
		{Provider: "p <&> \"q\"", MachineID: "m\x00\x01\x1f", OperationID: " lead", ClusterID: "trail ",
			ShardMetadata: map[string]string{"ctl\r\n\t": "a\rb", "üñí©ødé 🚀": "日本語", "bad\xffutf8": "\xfe", "x": "]]>"}},
	}
	for _, m := range tests {
		for _, ns := range []bool{true, false} {
			s, err := m.Marshal(ns)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeMetadata(s)
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
	if !contains(s, `xmlns="`+MetadataNS+`"`, "<provider>prov</provider>", "<machine>m-1</machine>", "<cluster>c</cluster>") {
		t.Fatalf("plain values not stored readably: %s", s)
	}
}

func TestDecodeMetadataStrict(t *testing.T) {
	t.Parallel()
	bad := []string{
		``,
		`<other xmlns="` + MetadataNS + `"><provider>p</provider><machine>m</machine></other>`,
		`<instance xmlns="https://elsewhere/"><provider>p</provider><machine>m</machine></instance>`,
		`<instance><provider>p</provider></instance>`,
		`<instance><provider encoding="rot13">p</provider><machine>m</machine></instance>`,
		`<instance><provider encoding="base64">!!!</provider><machine>m</machine></instance>`,
		`<instance><provider>p</provider><machine>m</machine><shard-metadata><entry><key>k</key><value>1</value></entry><entry><key>k</key><value>2</value></entry></shard-metadata></instance>`,
	}
	for _, s := range bad {
		if m, err := DecodeMetadata(s); err == nil {
			t.Errorf("DecodeMetadata(%q) = %#v, want error", s, m)
		}
	}
	// libvirt hands the element back prefixed and indented.
	m, err := DecodeMetadata("<bigfleet:instance xmlns:bigfleet=\"" + MetadataNS + "\">\n  <bigfleet:provider>p</bigfleet:provider>\n  <machine>m</machine>\n</bigfleet:instance>")
	if err != nil || m.Provider != "p" || m.MachineID != "m" {
		t.Fatalf("prefixed form: %#v, %v", m, err)
	}
}

func sameMetadata(a, b Metadata) bool {
	return a.Provider == b.Provider && a.MachineID == b.MachineID && a.OperationID == b.OperationID &&
		a.ClusterID == b.ClusterID && maps.Equal(a.ShardMetadata, b.ShardMetadata) &&
		(len(a.ShardMetadata) == 0) == (len(b.ShardMetadata) == 0)
}

// FuzzDecodeMetadata: any input decodes or fails cleanly, and whatever
// decodes survives a re-encode unchanged.
func FuzzDecodeMetadata(f *testing.F) {
	f.Add(`<instance xmlns="` + MetadataNS + `"><provider>p</provider><machine>m</machine></instance>`)
	f.Add(`<instance><provider encoding="base64">cA==</provider><machine>m</machine><cluster>c</cluster><shard-metadata><entry><key>k</key><value encoding="base64">AAE=</value></entry></shard-metadata></instance>`)
	f.Add(`<instance><provider>`)
	f.Fuzz(func(t *testing.T, s string) {
		m, err := DecodeMetadata(s)
		if err != nil {
			return
		}
		if m.Provider == "" || m.MachineID == "" {
			t.Fatalf("accepted metadata without owner: %#v", m)
		}
		out, err := m.Marshal(true)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeMetadata(out)
		if err != nil || !sameMetadata(again, m) {
			t.Fatalf("re-encode changed it: %#v -> %s -> %#v (%v)", m, out, again, err)
		}
	})
}

// FuzzMetadataRoundTrip: every value a proto string (or any byte string)
// may hold comes back byte for byte.
func FuzzMetadataRoundTrip(f *testing.F) {
	f.Add("p", "m", "op", "c", "k", "v")
	f.Add("p", "m\x00", "", "", "", "\r\n")
	f.Fuzz(func(t *testing.T, p, m, op, c, k, v string) {
		if p == "" || m == "" {
			return
		}
		in := Metadata{Provider: p, MachineID: m, OperationID: op, ClusterID: c, ShardMetadata: map[string]string{k: v}}
		s, err := in.Marshal(false)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeMetadata(s)
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
