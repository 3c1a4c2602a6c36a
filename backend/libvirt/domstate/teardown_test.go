package domstate

import (
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// flagDomain answers UndefineFlags as a libvirt of a given age does.
type flagDomain struct {
	virt.Domain
	refuse func(libvirt.DomainUndefineFlagsValues) bool
	calls  []libvirt.DomainUndefineFlagsValues
	plain  bool
}

func (d *flagDomain) UndefineFlags(f libvirt.DomainUndefineFlagsValues) error {
	d.calls = append(d.calls, f)
	if d.refuse(f) {
		return libvirt.Error{Code: libvirt.ERR_INVALID_ARG, Message: "unsupported flags"}
	}
	return nil
}

func (d *flagDomain) Undefine() error { d.plain = true; return nil }

// Delete asks libvirt to remove the TPM state and the NVRAM with the
// domain; a libvirt without VIR_DOMAIN_UNDEFINE_TPM (before 8.9) is asked
// again without it, one without the others gets plain undefine.
func TestUndefineRemovesTPMStateWhereLibvirtCan(t *testing.T) {
	t.Parallel()
	all := UndefineFlags | libvirt.DOMAIN_UNDEFINE_TPM
	modern := &flagDomain{refuse: func(libvirt.DomainUndefineFlagsValues) bool { return false }}
	if err := Undefine(modern); err != nil || len(modern.calls) != 1 || modern.calls[0] != all ||
		modern.calls[0]&libvirt.DOMAIN_UNDEFINE_NVRAM == 0 {
		t.Fatalf("libvirt 9+: %v calls %v", err, modern.calls)
	}
	old := &flagDomain{refuse: func(f libvirt.DomainUndefineFlagsValues) bool { return f&libvirt.DOMAIN_UNDEFINE_TPM != 0 }}
	if err := Undefine(old); err != nil || len(old.calls) != 2 || old.calls[1] != UndefineFlags || old.plain {
		t.Fatalf("libvirt < 8.9: %v calls %v plain %v", err, old.calls, old.plain)
	}
	bare := &flagDomain{refuse: func(libvirt.DomainUndefineFlagsValues) bool { return true }}
	if err := Undefine(bare); err != nil || len(bare.calls) != 2 || !bare.plain {
		t.Fatalf("no flags: %v calls %v plain %v", err, bare.calls, bare.plain)
	}
}
