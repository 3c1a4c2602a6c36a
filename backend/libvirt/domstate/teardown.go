package domstate

import (
	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// UndefineFlags also removes what libvirt keeps beside a definition, so a
// later domain of the same name starts clean.
const UndefineFlags = libvirt.DOMAIN_UNDEFINE_MANAGED_SAVE | libvirt.DOMAIN_UNDEFINE_SNAPSHOTS_METADATA |
	libvirt.DOMAIN_UNDEFINE_CHECKPOINTS_METADATA | libvirt.DOMAIN_UNDEFINE_NVRAM

// Destroy stops dom at once; a domain that is not running, or gone, is
// fine.
func Destroy(dom virt.Domain) error {
	err := dom.Destroy()
	if err == nil || virt.IsCode(err, libvirt.ERR_OPERATION_INVALID, libvirt.ERR_NO_DOMAIN) {
		return nil
	}
	return err
}

// Undefine removes dom's definition and its side metadata: the UEFI
// NVRAM copy and the swtpm state of a shaped machine too. A libvirt older
// than 8.9 does not know VIR_DOMAIN_UNDEFINE_TPM (and removes a TPM's
// state anyway unless told to keep it), so it is asked again without;
// drivers that refuse the other flags (no NVRAM or checkpoint support)
// get plain undefine: there is then nothing of that kind to leave behind.
func Undefine(dom virt.Domain) error {
	unsupported := func(err error) bool {
		return virt.IsCode(err, libvirt.ERR_NO_SUPPORT, libvirt.ERR_INVALID_ARG, libvirt.ERR_ARGUMENT_UNSUPPORTED)
	}
	err := dom.UndefineFlags(UndefineFlags | libvirt.DOMAIN_UNDEFINE_TPM)
	if unsupported(err) {
		err = dom.UndefineFlags(UndefineFlags)
	}
	if unsupported(err) {
		err = dom.Undefine()
	}
	if err == nil || virt.IsCode(err, libvirt.ERR_NO_DOMAIN) {
		return nil
	}
	return err
}
