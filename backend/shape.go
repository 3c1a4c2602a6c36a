package backend

// Shape is the hardware of an instance type beyond its vCPU and memory:
// what the operator's --instance-types file asks of the machines of that
// type. The zero Shape is the plain machine every type had before shapes
// (the golden image's size, the hypervisor's default firmware and CPU, no
// TPM, no hugepages, the provider's --network NIC).
type Shape struct {
	// DiskGiB is the overlay's virtual size in GiB (0: the golden image's).
	DiskGiB int
	// Firmware is FirmwareBIOS, FirmwareUEFI or FirmwareUEFISecure ("":
	// the hypervisor's default, SeaBIOS on x86).
	Firmware string
	// TPM adds a TPM 2.0 emulated by swtpm.
	TPM bool
	// CPU is the guest CPU model and topology (zero: the hypervisor's).
	CPU CPUShape
	// HugePageKiB backs the guest's memory with huge pages of this size in
	// KiB (0: ordinary pages).
	HugePageKiB uint64
	// NICs replace --network for the type when non-nil (an empty, non-nil
	// list: no NIC at all).
	NICs []NIC
}

// Firmware values of Shape.Firmware.
const (
	FirmwareBIOS       = "bios"
	FirmwareUEFI       = "uefi"
	FirmwareUEFISecure = "uefi-secure"
)

// UEFI reports whether the shape boots UEFI firmware.
func (s Shape) UEFI() bool { return s.Firmware == FirmwareUEFI || s.Firmware == FirmwareUEFISecure }

// CPUShape is a guest CPU. Sockets×Cores×Threads equals the type's vCPU
// when set; all zero leaves the topology to the hypervisor.
type CPUShape struct {
	// Model is CPUHostPassthrough, CPUHostModel, a named model ("Haswell",
	// "qemu64") or "" (host-passthrough where KVM is used, else the
	// hypervisor's default model).
	Model                   string
	Sockets, Cores, Threads int
}

// CPU model modes of CPUShape.Model.
const (
	CPUHostPassthrough = "host-passthrough"
	CPUHostModel       = "host-model"
)

// Set reports whether the type says anything about its CPU.
func (c CPUShape) Set() bool { return c != CPUShape{} }

// NIC is one network interface: on a libvirt network or a host bridge
// (exactly one of the two), with a device model ("" is virtio).
type NIC struct {
	Network string
	Bridge  string
	Model   string
}
