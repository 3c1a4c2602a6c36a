package domxml

import (
	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
)

// Params is everything that varies between the domains we define.
type Params struct {
	Name       string
	Type       string // "kvm", "qemu" (TCG), or what the driver offers
	VCPU       int
	MemoryMiB  int
	Overlay    string        // path of the overlay volume
	OverlayFmt string        // its format (we create qcow2)
	Seed       string        // path of the NoCloud seed volume, or ""
	NICs       []backend.NIC // the machine's NICs (ResolvedNICs)
	Kernel     string        // direct kernel boot when set
	Initrd     string
	Cmdline    string
	Metadata   string // our element, with its xmlns
	// Shape is the instance type's machine shape (zero: a plain machine).
	Shape backend.Shape
}

// Build assembles the domain definition section by section.
func Build(p Params) *libvirtxml.Domain {
	return &libvirtxml.Domain{
		Type:          p.Type,
		Name:          p.Name,
		Metadata:      &libvirtxml.DomainMetadata{XML: p.Metadata},
		Memory:        &libvirtxml.DomainMemory{Value: uint(p.MemoryMiB), Unit: "MiB"},
		MemoryBacking: memoryBacking(p.Shape),
		VCPU:          &libvirtxml.DomainVCPU{Value: uint(p.VCPU)},
		CPU:           cpuSection(p),
		OS:            osSection(p),
		Features:      features(p.Shape),
		OnPoweroff:    "destroy",
		OnReboot:      "restart",
		OnCrash:       "destroy",
		Devices:       devices(p),
	}
}

// memoryBacking backs the guest's memory with huge pages of the shape's
// size, when it has one.
func memoryBacking(s backend.Shape) *libvirtxml.DomainMemoryBacking {
	if s.HugePageKiB == 0 {
		return nil
	}
	return &libvirtxml.DomainMemoryBacking{MemoryHugePages: &libvirtxml.DomainMemoryHugepages{
		Hugepages: []libvirtxml.DomainMemoryHugepage{{Size: uint(s.HugePageKiB), Unit: "KiB"}},
	}}
}

// cpuSection is the shape's CPU: its model (host-passthrough when it names
// none and the domain runs on KVM; the hypervisor's default model under
// TCG, which cannot pass the host's CPU through) and topology. A shape
// without a cpu field leaves the element out, as before shapes.
func cpuSection(p Params) *libvirtxml.DomainCPU {
	c := p.Shape.CPU
	if !c.Set() {
		return nil
	}
	cpu := &libvirtxml.DomainCPU{}
	switch model := c.Model; {
	case model == "" && p.Type == "kvm", model == backend.CPUHostPassthrough:
		cpu.Mode = backend.CPUHostPassthrough
	case model == backend.CPUHostModel:
		cpu.Mode = backend.CPUHostModel
	case model != "":
		cpu.Mode, cpu.Match = "custom", "exact"
		cpu.Model = &libvirtxml.DomainCPUModel{Value: model, Fallback: "forbid"}
	}
	if c.Sockets > 0 {
		cpu.Topology = &libvirtxml.DomainCPUTopology{Sockets: c.Sockets, Cores: c.Cores, Threads: c.Threads}
	}
	if cpu.Mode == "" && cpu.Topology == nil {
		return nil
	}
	return cpu
}

// features: ACPI always; SMM for Secure Boot, which OVMF's secure build
// needs to protect its variable store.
func features(s backend.Shape) *libvirtxml.DomainFeatureList {
	f := &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}}
	if s.Firmware == backend.FirmwareUEFISecure {
		f.SMM = &libvirtxml.DomainFeatureSMM{State: "on"}
	}
	return f
}

// osSection boots the kernel directly when one is configured (no bootable
// disk needed), else from the overlay disk.
func osSection(p Params) *libvirtxml.DomainOS {
	os := &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm"}}
	if code, vars := FirmwareFiles(p.Shape.Firmware); code != "" {
		// OVMF from flash, read-only, with the domain's own copy of the
		// variable store template: libvirt creates and names it.
		os.Type.Machine = UEFIMachine
		os.Loader = &libvirtxml.DomainLoader{Path: code, Readonly: "yes", Type: "pflash"}
		if p.Shape.Firmware == backend.FirmwareUEFISecure {
			os.Loader.Secure = "yes"
		}
		os.NVRam = &libvirtxml.DomainNVRam{Template: vars}
	}
	if p.Kernel != "" {
		os.Kernel, os.Initrd, os.Cmdline = p.Kernel, p.Initrd, p.Cmdline
		return os
	}
	os.BootDevices = []libvirtxml.DomainBootDevice{{Dev: "hd"}}
	return os
}

func devices(p Params) *libvirtxml.DomainDeviceList {
	d := &libvirtxml.DomainDeviceList{
		Disks:    []libvirtxml.DomainDisk{fileDisk(p.Overlay, p.OverlayFmt, "vda", false)},
		Channels: []libvirtxml.DomainChannel{agentChannel()},
		Serials:  []libvirtxml.DomainSerial{{Source: ptySource(), Target: &libvirtxml.DomainSerialTarget{Port: uintp(0)}}},
		Consoles: []libvirtxml.DomainConsole{{Source: ptySource(), Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: uintp(0)}}},
	}
	if p.Seed != "" {
		d.Disks = append(d.Disks, fileDisk(p.Seed, "raw", "vdb", true))
	}
	for _, n := range p.NICs {
		d.Interfaces = append(d.Interfaces, nic(n))
	}
	if p.Shape.TPM {
		d.TPMs = []libvirtxml.DomainTPM{tpm()}
	}
	return d
}

// nic is one NIC on a libvirt network or a host bridge.
func nic(n backend.NIC) libvirtxml.DomainInterface {
	src := &libvirtxml.DomainInterfaceSource{}
	if n.Bridge != "" {
		src.Bridge = &libvirtxml.DomainInterfaceSourceBridge{Bridge: n.Bridge}
	} else {
		src.Network = &libvirtxml.DomainInterfaceSourceNetwork{Network: n.Network}
	}
	return libvirtxml.DomainInterface{Source: src, Model: &libvirtxml.DomainInterfaceModel{Type: nicModel(n)}}
}

func nicModel(n backend.NIC) string {
	if n.Model == "" {
		return "virtio"
	}
	return n.Model
}

// tpm is a TPM 2.0 on the CRB interface, emulated by swtpm; its state
// lives under /var/lib/libvirt/swtpm and goes with the domain
// (VIR_DOMAIN_UNDEFINE_TPM).
func tpm() libvirtxml.DomainTPM {
	return libvirtxml.DomainTPM{Model: "tpm-crb", Backend: &libvirtxml.DomainTPMBackend{
		Emulator: &libvirtxml.DomainTPMBackendEmulator{Version: "2.0"},
	}}
}

// ResolvedNICs are a machine's NICs: its type's network list, or one
// virtio NIC on --network (none without it).
func ResolvedNICs(s backend.Shape, network string) []backend.NIC {
	if s.NICs != nil {
		return s.NICs
	}
	if network == "" {
		return nil
	}
	return []backend.NIC{{Network: network}}
}

func fileDisk(path, format, dev string, readOnly bool) libvirtxml.DomainDisk {
	d := libvirtxml.DomainDisk{
		Device: "disk",
		Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: format},
		Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: path}},
		Target: &libvirtxml.DomainDiskTarget{Dev: dev, Bus: "virtio"},
	}
	if readOnly {
		d.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
	}
	return d
}

// agentChannel is the virtio-serial port qemu-ga listens on; libvirt picks
// the host-side socket path itself.
func agentChannel() libvirtxml.DomainChannel {
	return libvirtxml.DomainChannel{
		Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind"}},
		Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: AgentChannel}},
	}
}

// AgentChannel is the name of the guest-agent channel in every domain.
const AgentChannel = "org.qemu.guest_agent.0"

func ptySource() *libvirtxml.DomainChardevSource {
	return &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}}
}

func uintp(v uint) *uint { return &v }
