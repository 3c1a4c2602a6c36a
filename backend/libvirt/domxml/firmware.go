package domxml

import (
	"github.com/bigfleet/libvirt-provider/backend"
)

// OVMF as Debian's ovmf package ships it (2022.11-6 in bookworm: 2 MiB
// and 4 MiB builds, plain and Secure Boot, and variable stores blank,
// with Microsoft's keys enrolled (.ms) and with test keys (.snakeoil)).
// These are the 4 MiB ones libvirt's firmware descriptors in
// /usr/share/qemu/firmware name. uefi-secure boots the Secure Boot build
// from the store with Microsoft's keys (OVMF_VARS_4M.ms.fd): its db holds
// the UEFI CA that signs the distributions' shim, so an image booting
// through shim boots with Secure Boot on. Each domain gets its own NVRAM
// copy of the template, which libvirt makes and names itself; Delete
// removes it (VIR_DOMAIN_UNDEFINE_NVRAM).
const (
	OVMFCode       = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	OVMFVars       = "/usr/share/OVMF/OVMF_VARS_4M.fd"
	OVMFSecureCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	OVMFSecureVars = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
)

// FirmwareFiles returns the loader and NVRAM template of a UEFI firmware
// ("" for BIOS and the default).
func FirmwareFiles(fw string) (code, vars string) {
	switch fw {
	case backend.FirmwareUEFI:
		return OVMFCode, OVMFVars
	case backend.FirmwareUEFISecure:
		return OVMFSecureCode, OVMFSecureVars
	}
	return "", ""
}

// UEFIMachine is the machine type of UEFI domains: q35, which Secure Boot
// needs (SMM), for both UEFI firmwares so they differ only in the files.
const UEFIMachine = "q35"
