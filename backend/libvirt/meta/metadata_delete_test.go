package meta

import (
	"strings"
	"testing"
	"time"
)

// A Delete's intent round-trips (operation id in any text, its time to
// the nanosecond); an element without one decodes as none begun; a
// damaged one (no operation id, a time that does not parse) is an error,
// never "no Delete begun".
func TestMetadataDeleteIntent(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 12, 5, 10, 11, 12, 13, time.UTC)
	for _, op := range []string{"op-1", " lead\x00", "<&>"} {
		in := Metadata{Provider: "p", MachineID: "m", OperationID: "o", Delete: DeleteIntent{OperationID: op, Since: since}}
		for _, ns := range []bool{true, false} {
			s, err := in.Marshal(ns)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Decode(s)
			if err != nil || out.Delete.OperationID != op || !out.Delete.Since.Equal(since) || !out.Delete.Begun() {
				t.Fatalf("%s decoded %+v, %v", s, out.Delete, err)
			}
		}
	}
	none, err := Metadata{Provider: "p", MachineID: "m"}.Marshal(false)
	if err != nil || strings.Contains(none, "delete-intent") {
		t.Fatalf("no intent written as one: %s %v", none, err)
	}
	if out, err := Decode(none); err != nil || out.Delete.Begun() {
		t.Fatalf("no intent: %+v %v", out.Delete, err)
	}
	head := `<instance xmlns="` + NS + `"><provider>p</provider><machine>m</machine><operation>o</operation>`
	for _, bad := range []string{
		`<delete-intent since="2026-12-05T10:11:12Z"><operation></operation></delete-intent>`,
		`<delete-intent></delete-intent>`,
		`<delete-intent since="yesterday"><operation>op</operation></delete-intent>`,
		`<delete-intent><operation encoding="rot13">op</operation></delete-intent>`,
	} {
		if _, err := Decode(head + bad + `</instance>`); err == nil {
			t.Fatalf("damaged intent accepted: %s", bad)
		}
	}
}
