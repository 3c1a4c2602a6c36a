package meta

import (
	"errors"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// metaDom is a domain whose only answer is its metadata element.
type metaDom struct {
	virt.Domain
	xml string
	err error
}

func (d metaDom) GetMetadata(libvirt.DomainMetadataType, string, libvirt.DomainModificationImpact) (string, error) {
	return d.xml, d.err
}

func TestReadOwned(t *testing.T) {
	t.Parallel()
	ours, err := Metadata{Provider: "p", MachineID: "m", ClusterID: "c"}.Marshal(true)
	if err != nil {
		t.Fatal(err)
	}
	other, err := Metadata{Provider: "q", MachineID: "m"}.Marshal(true)
	if err != nil {
		t.Fatal(err)
	}
	rpc := libvirt.Error{Code: libvirt.ERR_RPC, Message: "link down"}
	tests := []struct {
		name      string
		dom       metaDom
		machine   string
		notOurs   bool
		wantInErr string
	}{
		{"ours", metaDom{xml: ours}, "m", false, ""},
		{"another machine", metaDom{xml: ours}, "m2", true, `belongs to provider "p" machine "m"`},
		{"another provider", metaDom{xml: other}, "m", true, `belongs to provider "q"`},
		{"no metadata", metaDom{err: libvirt.Error{Code: libvirt.ERR_NO_DOMAIN_METADATA}}, "m", true, "has no bigfleet metadata"},
		{"damaged", metaDom{xml: "<machine xmlns='" + NS + "'><provider>p"}, "m", true, "unreadable bigfleet metadata"},
		{"unreadable host", metaDom{err: rpc}, "m", false, "read metadata of d"},
	}
	for _, tc := range tests {
		md, err := ReadOwned(tc.dom, "d", "p", tc.machine)
		switch {
		case tc.wantInErr == "":
			if err != nil || md.ClusterID != "c" || md.MachineID != "m" {
				t.Errorf("%s: ReadOwned = %+v, %v; want our metadata", tc.name, md, err)
			}
		case err == nil:
			t.Errorf("%s: ReadOwned succeeded, want an error", tc.name)
		default:
			if errors.Is(err, backend.ErrNotOurs) != tc.notOurs {
				t.Errorf("%s: err %v: ErrNotOurs = %v, want %v", tc.name, err, !tc.notOurs, tc.notOurs)
			}
			if !strings.Contains(err.Error(), tc.wantInErr) {
				t.Errorf("%s: err %q lacks %q", tc.name, err, tc.wantInErr)
			}
			if tc.name == "unreadable host" && !errors.Is(err, rpc) {
				t.Errorf("%s: err %v lost the libvirt error", tc.name, err)
			}
		}
	}
}
