package meta

import (
	"strings"
	"testing"
)

// The host name and size round-trip; an element without them (an older
// provider's) still decodes, and a negative size does not.
func TestMetadataHostAndSize(t *testing.T) {
	t.Parallel()
	in := Metadata{Provider: "p", MachineID: "m", OperationID: "o", Host: "kvm-a1", VCPUs: 4, MemoryMiB: 8192}
	for _, ns := range []bool{true, false} {
		s, err := in.Marshal(ns)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(s, "<host>kvm-a1</host>") || !strings.Contains(s, `<size vcpus="4" memory-mib="8192"></size>`) {
			t.Fatalf("xml %s", s)
		}
		out, err := Decode(s)
		if err != nil || out.Host != "kvm-a1" || out.VCPUs != 4 || out.MemoryMiB != 8192 {
			t.Fatalf("decoded %+v, %v", out, err)
		}
	}
	old, err := Metadata{Provider: "p", MachineID: "m"}.Marshal(false)
	if err != nil || strings.Contains(old, "<host>") || strings.Contains(old, "<size") {
		t.Fatalf("empty host/size written: %s %v", old, err)
	}
	if out, err := Decode(old); err != nil || out.Host != "" || out.VCPUs != 0 {
		t.Fatalf("old element: %+v %v", out, err)
	}
	bad := `<instance xmlns="` + NS + `"><provider>p</provider><machine>m</machine><operation>o</operation><size vcpus="-1" memory-mib="1"></size></instance>`
	if _, err := Decode(bad); err == nil {
		t.Fatal("negative size accepted")
	}
}
