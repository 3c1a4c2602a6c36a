package libvirt

import (
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
)

// destDomainXML is VIR_MIGRATE_PARAM_DEST_XML: the source's migratable
// XML (libvirt's own rendering of our definition; the caller checks it,
// before and after, against the definition policy: migratepolicy.go)
// with every file disk pointed at its destination volume and our metadata
// element replaced by md (its host set to the destination), so Inventory
// and a state file rebuilt from libvirt agree on where the VM is. A
// writable file disk without a destination, or a destination that runs
// guests under another accelerator, is refused: QEMU could not carry the
// guest across either.
func destDomainXML(src string, disks map[string]string, md, dstType string) (string, error) {
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
				disk.Source.File.File = to
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

// createPlainVolume makes a qcow2 volume of capacity bytes with no backing
// file (the destination of a whole-disk copy) and returns its path.
func createPlainVolume(pool hostconn.Pool, name string, capacity uint64) (string, error) {
	s, err := (&libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: capacity},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
	}).Marshal()
	if err != nil {
		return "", err
	}
	vol, err := pool.StorageVolCreateXML(s, 0)
	if err != nil {
		return "", err
	}
	defer vol.Free()
	return vol.GetPath()
}
