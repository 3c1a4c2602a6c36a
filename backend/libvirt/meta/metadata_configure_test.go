package meta

import (
	"maps"
	"strings"
	"testing"
	"time"
)

// A Configure's intent round-trips (operation and cluster ids in any
// text, its shard metadata, its time to the nanosecond) beside a binding
// and a Delete's intent; an element without one decodes as none begun; a
// damaged one (no operation or cluster id, a time that does not parse, a
// shard key twice) is an error, never "no Configure begun".
func TestMetadataConfigureIntent(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 12, 7, 11, 12, 13, 14, time.UTC)
	for _, op := range []string{"op-1", " lead\x00", "<&>"} {
		c := ConfigureIntent{OperationID: op, ClusterID: "c\x01" + op, ShardMetadata: map[string]string{"k": "v", "\x00": " "}, Since: since}
		in := Metadata{Provider: "p", MachineID: "m", OperationID: "o", ClusterID: "old", Configure: c}
		for _, ns := range []bool{true, false} {
			s, err := in.Marshal(ns)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Decode(s)
			if err != nil || !out.Configure.Begun() || out.Configure.OperationID != op || out.Configure.ClusterID != c.ClusterID ||
				!maps.Equal(out.Configure.ShardMetadata, c.ShardMetadata) || !out.Configure.Since.Equal(since) || out.ClusterID != "old" {
				t.Fatalf("%s decoded %+v, %v", s, out, err)
			}
		}
	}
	none, err := Metadata{Provider: "p", MachineID: "m", ClusterID: "c"}.Marshal(false)
	if err != nil || strings.Contains(none, "configure-intent") {
		t.Fatalf("no intent written as one: %s %v", none, err)
	}
	if out, err := Decode(none); err != nil || out.Configure.Begun() {
		t.Fatalf("no intent: %+v %v", out.Configure, err)
	}
	head := `<instance xmlns="` + NS + `"><provider>p</provider><machine>m</machine><operation>o</operation>`
	for _, bad := range []string{
		`<configure-intent><operation></operation><cluster>c</cluster></configure-intent>`,
		`<configure-intent><operation>op</operation></configure-intent>`,
		`<configure-intent></configure-intent>`,
		`<configure-intent since="yesterday"><operation>op</operation><cluster>c</cluster></configure-intent>`,
		`<configure-intent><operation encoding="rot13">op</operation><cluster>c</cluster></configure-intent>`,
		`<configure-intent><operation>op</operation><cluster>c</cluster><shard-metadata><entry><key>k</key><value>1</value></entry><entry><key>k</key><value>2</value></entry></shard-metadata></configure-intent>`,
	} {
		if _, err := Decode(head + bad + `</instance>`); err == nil {
			t.Fatalf("damaged intent accepted: %s", bad)
		}
	}
}
