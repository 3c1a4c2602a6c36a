package volume

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// goldenXML is a golden image's volume as libvirt's test driver renders it
// (backend/libvirt/testdata/node.xml): no modification time.
const goldenXML = `<volume type='file'>
  <name>golden.qcow2</name>
  <key>/var/lib/bigfleet-pool/golden.qcow2</key>
  <capacity unit='bytes'>67108864</capacity>
  <allocation unit='bytes'>10485760</allocation>
  <target>
    <path>/var/lib/bigfleet-pool/golden.qcow2</path>
    <format type='qcow2'/>
  </target>
</volume>`

func volXML(t *testing.T, s string) *libvirtxml.StorageVolume {
	t.Helper()
	var x libvirtxml.StorageVolume
	if err := x.Unmarshal(s); err != nil {
		t.Fatal(err)
	}
	return &x
}

// Without a modification time (nothing to tell two images apart but
// their name), the identity is empty and never matches; with one, it
// names the format, the sizes and the time to the nanosecond.
func TestGoldenIdentityEmptyWithoutMtime(t *testing.T) {
	t.Parallel()
	info := &libvirt.StorageVolInfo{Capacity: 1}
	if id := GoldenIdentity(volXML(t, goldenXML), info); id != "" {
		t.Fatalf("identity %q without an mtime", id)
	}
	stamped := strings.Replace(goldenXML, "</target>", "<timestamps><mtime>1796372634.913613625</mtime></timestamps></target>", 1)
	if id := GoldenIdentity(volXML(t, stamped), info); id != "qcow2/1/0/1796372634.913613625" {
		t.Fatalf("identity %q", id)
	}
	other := &libvirt.StorageVolInfo{Capacity: 2}
	if GoldenIdentity(volXML(t, stamped), info) == GoldenIdentity(volXML(t, stamped), other) {
		t.Fatal("two sizes, one identity")
	}
}
