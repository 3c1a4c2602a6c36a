package domxml

import (
	"fmt"

	"github.com/bigfleet/libvirt-provider/backend"
	"libvirt.org/go/libvirtxml"
)

// DestXML is VIR_MIGRATE_PARAM_DEST_XML: the source's migratable
// XML (libvirt's own rendering of our definition; the caller checks it,
// before and after, against the definition policy: backend/libvirt/migrate/policy.go)
// with every file disk pointed at its destination volume (without the
// source's backing chain) and our metadata
// element replaced by md (its host set to the destination), so Inventory
// and a state file rebuilt from libvirt agree on where the VM is. A
// writable file disk without a destination, or a destination that runs
// guests under another accelerator, is refused: QEMU could not carry the
// guest across either.
func DestXML(src string, disks map[string]string, md, dstType string) (string, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(src); err != nil {
		return "", fmt.Errorf("parse migratable XML: %w", err)
	}
	if dstType != "" && d.Type != dstType {
		return "", fmt.Errorf("the domain runs under %s and the destination runs guests under %s: a live migration cannot change the accelerator", d.Type, dstType)
	}
	if d.Devices != nil {
		for i := range d.Devices.Disks {
			disk := &d.Devices.Disks[i]
			if disk.Source == nil || disk.Source.File == nil {
				continue
			}
			to, ok := disks[disk.Source.File.File]
			switch {
			case ok:
				// The destination's volume has its own backing in its
				// qcow2 header, which libvirt reads there; the source's
				// rendered chain names the source's files.
				disk.Source.File.File, disk.BackingStore = to, nil
			case disk.ReadOnly == nil:
				return "", fmt.Errorf("disk %s (%s) is not one of the machine's volumes: nothing to copy it to", diskDev(disk), disk.Source.File.File)
			}
		}
	}
	d.Metadata = &libvirtxml.DomainMetadata{XML: md}
	return d.Marshal()
}

func diskDev(d *libvirtxml.DomainDisk) string {
	if d.Target != nil {
		return d.Target.Dev
	}
	return "?"
}

// Shaped: the domain has firmware, a TPM, memory backing or a CPU of an
// instance type's shape, which the migration policy (the zero shape)
// refuses.
func Shaped(d *libvirtxml.Domain) bool {
	return (d.OS != nil && (d.OS.Loader != nil || d.OS.NVRam != nil)) || d.MemoryBacking != nil ||
		(d.Devices != nil && len(d.Devices.TPMs) > 0) ||
		(d.CPU != nil && (d.CPU.Topology != nil || d.CPU.Mode == backend.CPUHostPassthrough || d.CPU.Mode == backend.CPUHostModel))
}

// DefaultEmulator is the emulator libvirt on conn gives a domain of type
// domType (the first hvm guest's; the domain-specific one if it names its
// own), as its capabilities say.
func DefaultEmulator(conn interface{ GetCapabilities() (string, error) }, domType string) (string, error) {
	s, err := conn.GetCapabilities()
	if err != nil {
		return "", err
	}
	var caps libvirtxml.Caps
	if err := caps.Unmarshal(s); err != nil {
		return "", fmt.Errorf("parse capabilities: %w", err)
	}
	arch := caps.Host.CPU.Arch
	for _, g := range caps.Guests {
		if g.OSType != "hvm" || (arch != "" && g.Arch.Name != arch) {
			continue
		}
		for _, d := range g.Arch.Domains {
			if d.Type == domType {
				if d.Emulator != "" {
					return d.Emulator, nil
				}
				return g.Arch.Emulator, nil
			}
		}
	}
	return "", fmt.Errorf("no hvm guest of type %s on arch %s", domType, arch)
}
