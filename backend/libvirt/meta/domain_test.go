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

// setDom records what is written to it.
type setDom struct {
	metaDom
	written []string
}

func (d *setDom) IsActive() (bool, error) { return false, nil }

func (d *setDom) SetMetadata(_ libvirt.DomainMetadataType, content, _, _ string, _ libvirt.DomainModificationImpact) error {
	d.written = append(d.written, content)
	return nil
}

func TestWriteOwnedWritesOnlyOurs(t *testing.T) {
	t.Parallel()
	ours, err := Metadata{Provider: "p", MachineID: "m"}.Marshal(true)
	if err != nil {
		t.Fatal(err)
	}
	d := &setDom{metaDom: metaDom{xml: ours}}
	if err := WriteOwned(d, "d", "p", Metadata{Provider: "p", MachineID: "m", ClusterID: "c1"}); err != nil || len(d.written) != 1 {
		t.Fatalf("WriteOwned on our domain: %v, wrote %q", err, d.written)
	}
	if got, err := Decode(d.written[0]); err != nil || got.ClusterID != "c1" {
		t.Fatalf("written %q decodes to %+v, %v; want cluster c1", d.written[0], got, err)
	}
	d = &setDom{metaDom: metaDom{xml: ours}}
	if err := WriteOwned(d, "d", "p", Metadata{Provider: "p", MachineID: "m2"}); !errors.Is(err, backend.ErrNotOurs) || len(d.written) != 0 {
		t.Fatalf("WriteOwned on another machine's domain: %v, wrote %q", err, d.written)
	}
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
