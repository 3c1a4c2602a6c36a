package libvirt

import (
	"libvirt.org/go/libvirtxml"
)

// domainParams is everything that varies between the domains we define.
type domainParams struct {
	Name       string
	Type       string // "kvm", "qemu" (TCG), or what the driver offers
	VCPU       int
	MemoryMiB  int
	Overlay    string // path of the overlay volume
	OverlayFmt string // its format (we create qcow2)
	Seed       string // path of the NoCloud seed volume, or ""
	Network    string // libvirt network name, or "" for no NIC
	Kernel     string // direct kernel boot when set
	Initrd     string
	Cmdline    string
	Metadata   string // our element, with its xmlns
}

// buildDomain assembles the domain definition section by section.
func buildDomain(p domainParams) *libvirtxml.Domain {
	return &libvirtxml.Domain{
		Type:       p.Type,
		Name:       p.Name,
		Metadata:   &libvirtxml.DomainMetadata{XML: p.Metadata},
		Memory:     &libvirtxml.DomainMemory{Value: uint(p.MemoryMiB), Unit: "MiB"},
		VCPU:       &libvirtxml.DomainVCPU{Value: uint(p.VCPU)},
		OS:         osSection(p),
		Features:   &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		Devices:    devices(p),
	}
}

// osSection boots the kernel directly when one is configured (no bootable
// disk needed), else from the overlay disk.
func osSection(p domainParams) *libvirtxml.DomainOS {
	os := &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm"}}
	if p.Kernel != "" {
		os.Kernel, os.Initrd, os.Cmdline = p.Kernel, p.Initrd, p.Cmdline
		return os
	}
	os.BootDevices = []libvirtxml.DomainBootDevice{{Dev: "hd"}}
	return os
}

func devices(p domainParams) *libvirtxml.DomainDeviceList {
	d := &libvirtxml.DomainDeviceList{
		Disks:    []libvirtxml.DomainDisk{fileDisk(p.Overlay, p.OverlayFmt, "vda", false)},
		Channels: []libvirtxml.DomainChannel{agentChannel()},
		Serials:  []libvirtxml.DomainSerial{{Source: ptySource(), Target: &libvirtxml.DomainSerialTarget{Port: uintp(0)}}},
		Consoles: []libvirtxml.DomainConsole{{Source: ptySource(), Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: uintp(0)}}},
	}
	if p.Seed != "" {
		d.Disks = append(d.Disks, fileDisk(p.Seed, "raw", "vdb", true))
	}
	if p.Network != "" {
		d.Interfaces = []libvirtxml.DomainInterface{{
			Source: &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: p.Network}},
			Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
		}}
	}
	return d
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
