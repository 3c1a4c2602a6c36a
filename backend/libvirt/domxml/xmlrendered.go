package domxml

import (
	"encoding/xml"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// CheckRendered applies the definition policy to a domain as libvirt
// renders it (the migratable XML a migration's destination definition is
// made from), not as Create wrote it. libvirt fills in what Create left to
// it: a UUID, currentMemory, the default resource partition, the machine
// type, a CPU model, the clock, the host's default emulator, PCI and
// virtio-serial addresses, the controllers those addresses hang on, a MAC,
// the serial port's model, PS/2 input and a memory balloon. Those are
// removed here, each only in the shape libvirt gives it for our domain
// (any other shape is left in place and refused by check, which knows no
// such field); everything else goes through the very check a Create's
// definition does. The domain d is not changed.
func (p Policy) CheckRendered(d *libvirtxml.Domain) error {
	c, err := cloneDomain(d)
	if err != nil {
		return err
	}
	errs := p.stripRendered(c)
	errs = append(errs, p.Check(c))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rendered domain XML refused by the definition policy: %w", err)
	}
	return nil
}

func cloneDomain(d *libvirtxml.Domain) (*libvirtxml.Domain, error) {
	s, err := d.Marshal()
	if err != nil {
		return nil, err
	}
	var c libvirtxml.Domain
	if err := c.Unmarshal(s); err != nil {
		return nil, err
	}
	clearXMLNames(reflect.ValueOf(&c).Elem())
	return &c, nil
}

// clearXMLNames zeroes every XMLName the parser filled in: it records an
// element's name, not its content, and check (written for the structs
// Create builds, where it is empty) would count it as a field set.
func clearXMLNames(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			clearXMLNames(v.Elem())
		}
	case reflect.Slice:
		for i := range v.Len() {
			clearXMLNames(v.Index(i))
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[xml.Name]() {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				clearXMLNames(v.Field(i))
			}
		}
	}
}

// stripRendered removes from d what libvirt adds to our definition.
func (p Policy) stripRendered(d *libvirtxml.Domain) []error {
	var errs []error
	d.UUID, d.ID = "", nil // identity and runtime id: libvirt's, checked by it on arrival
	if d.CurrentMemory != nil && d.Memory != nil && memKiB(d.CurrentMemory.Value, d.CurrentMemory.Unit) == memKiB(d.Memory.Value, d.Memory.Unit) {
		d.CurrentMemory = nil
	}
	if d.Resource != nil && d.Resource.Partition == "/machine" && d.Resource.FibreChannel == nil {
		d.Resource = nil
	}
	if d.OS != nil && d.OS.Type != nil {
		d.OS.Type.Arch, d.OS.Type.Machine = "", "" // the guest ABI libvirt chose at Create
	}
	if d.CPU != nil {
		if err := renderedCPU(*d.CPU); err != nil {
			errs = append(errs, err)
		} else {
			d.CPU = nil
		}
	}
	if d.Clock != nil && d.Clock.Offset == "utc" && len(setFields(*d.Clock)) == 1 {
		d.Clock = nil
	}
	d.SecLabel = drop(d.SecLabel, dynamicLabel)
	if d.Devices != nil {
		p.stripDevices(d.Devices)
	}
	return errs
}

// memKiB compares memory sizes written in different units (libvirt renders
// KiB, Create writes MiB).
func memKiB(v uint, unit string) uint {
	switch unit {
	case "", "KiB", "k", "K":
		return v
	case "MiB", "M":
		return v << 10
	case "GiB", "G":
		return v << 20
	}
	return 0 // an unexpected unit never matches
}

// renderedCPU: the named CPU model libvirt picks for a domain without a
// <cpu> element (qemu64 under TCG), possibly expanded into features; never
// host-passthrough, a topology, NUMA or a cache layout.
func renderedCPU(c libvirtxml.DomainCPU) error {
	ok := slices.Contains([]string{"", "custom"}, c.Mode) && slices.Contains([]string{"", "exact"}, c.Match) &&
		slices.Contains([]string{"", "none", "partial", "full"}, c.Check) &&
		(c.Model == nil || (slices.Contains([]string{"", "forbid", "allow"}, c.Model.Fallback) && c.Model.VendorID == ""))
	for _, f := range c.Features {
		ok = ok && slices.Contains([]string{"require", "disable"}, f.Policy)
	}
	c.Mode, c.Match, c.Check, c.Model, c.Features = "", "", "", nil, nil
	if left := setFields(c); !ok || len(left) > 0 {
		return fmt.Errorf("a cpu element libvirt does not render for our domains (mode %q, sets %v)", c.Mode, left)
	}
	return nil
}

// dynamicLabel: a security label libvirt generates itself (an operator's
// security driver); a static or base label names a context we never chose.
func dynamicLabel(l libvirtxml.DomainSecLabel) bool {
	return (l.Type == "dynamic" && l.BaseLabel == "") || (l.Type == "none" && l.Label == "" && l.ImageLabel == "")
}

func (p Policy) stripDevices(dv *libvirtxml.DomainDeviceList) {
	if p.Emulator != "" && dv.Emulator == p.Emulator {
		dv.Emulator = ""
	}
	for i := range dv.Disks {
		dv.Disks[i].Address = pciOnly(dv.Disks[i].Address)
		if p.probedChain(dv.Disks[i].BackingStore) {
			dv.Disks[i].BackingStore = nil
		}
	}
	for i := range dv.Interfaces {
		n := &dv.Interfaces[i]
		if n.MAC != nil && n.MAC.Type == "" && n.MAC.Check == "" {
			n.MAC = nil
		}
		n.Address = pciOnly(n.Address)
		if t := n.Target; t != nil && (*t == libvirtxml.DomainInterfaceTarget{Dev: t.Dev}) && generatedTap(t.Dev) {
			n.Target = nil
		}
	}
	for i := range dv.Serials {
		if t := dv.Serials[i].Target; t != nil && t.Type == "isa-serial" && (t.Model == nil || t.Model.Name == "isa-serial") {
			t.Type, t.Model = "", nil
		}
	}
	for i := range dv.Channels {
		if a := dv.Channels[i].Address; a != nil && (*a == libvirtxml.DomainAddress{VirtioSerial: a.VirtioSerial}) {
			dv.Channels[i].Address = nil
		}
	}
	dv.Controllers = drop(dv.Controllers, renderedController)
	dv.Inputs = drop(dv.Inputs, ps2Input)
	if b := dv.MemBalloon; b != nil && (b.Model == "virtio" || b.Model == "none") {
		c := *b
		c.Address = pciOnly(c.Address)
		if (c == libvirtxml.DomainMemBalloon{XMLName: c.XMLName, Model: c.Model}) {
			dv.MemBalloon = nil
		}
	}
}

// probedChain: the backing chain libvirt renders for a running domain
// once it has read the overlay's qcow2 header (some versions render it in
// the migratable XML too, and keep it in a definition made from one): file
// sources in p.Backing, each level nothing but its index, format and file,
// ending in an empty element or none. Any other chain names a file the
// machine's volumes do not, and is left for check to refuse.
func (p Policy) probedChain(b *libvirtxml.DomainDiskBackingStore) bool {
	if b == nil {
		return false
	}
	for ; b != nil; b = b.BackingStore {
		if b.Format == nil && b.BackingStore == nil && b.Index == 0 && (b.Source == nil || *b.Source == (libvirtxml.DomainDiskSource{})) {
			return true // <backingStore/>, the end of the chain: the golden image has no backing
		}
		if b.Source == nil || b.Source.File == nil || !slices.Contains(p.Backing, b.Source.File.File) {
			return false
		}
		if b.Format != nil && (b.Format.MetadataCache != nil || (b.Format.Type != "qcow2" && b.Format.Type != "raw")) {
			return false
		}
		src, file := *b.Source, *b.Source.File
		src.File, src.Index, file.File = nil, 0, "" // libvirt numbers the chain's levels
		if len(setFields(src)) > 0 || len(setFields(file)) > 0 {
			return false
		}
	}
	return true
}

// pciOnly returns nil for a plain PCI address (libvirt's slot assignment,
// which the destination must keep for the guest's ABI) and any other
// address unchanged, for check to refuse.
func pciOnly(a *libvirtxml.DomainAddress) *libvirtxml.DomainAddress {
	if a == nil || a.PCI == nil || (*a != libvirtxml.DomainAddress{PCI: a.PCI}) || a.PCI.ZPCI != nil || a.PCI.MultiFunction != "" {
		return a
	}
	return nil
}

// renderedController: the buses libvirt adds for our devices (the
// virtio-serial controller of the agent channel, the machine's PCI root
// and USB controller), with nothing but their index, model and address.
func renderedController(c libvirtxml.DomainController) bool {
	if !slices.Contains([]string{"virtio-serial", "pci", "usb"}, c.Type) {
		return false
	}
	if c.Type == "virtio-serial" && c.VirtIOSerial != nil && (c.VirtIOSerial.Ports != nil || c.VirtIOSerial.Vectors != nil) {
		return false
	}
	if c.Address != nil && pciOnly(c.Address) != nil {
		return false
	}
	c.XMLName, c.Type, c.Index, c.Model, c.Address, c.VirtIOSerial = xml.Name{}, "", nil, "", nil, nil
	if c.PCI != nil && c.PCI.Hole64 == nil {
		c.PCI = nil // a PCI controller's model name and target (chassis, port) are libvirt's layout
	}
	if c.USB != nil && c.USB.Port == nil {
		c.USB = nil // a companion controller's master port
	}
	return len(setFields(c)) == 0
}

// generatedTap: a tap device name a libvirt driver generated (qemu's
// vnetN, the test driver's testnetN); a name of anyone's choosing is not
// one, and check refuses it.
func generatedTap(dev string) bool {
	for _, p := range []string{"vnet", "testnet"} {
		if n, ok := strings.CutPrefix(dev, p); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			return true
		}
	}
	return false
}

// drop deletes the elements del reports, leaving nil (not an empty slice,
// which check would count as set) when none is left.
func drop[T any](s []T, del func(T) bool) []T {
	if s = slices.DeleteFunc(s, del); len(s) == 0 {
		return nil
	}
	return s
}

// ps2Input: the PS/2 mouse and keyboard of the i440fx machine, which
// libvirt always lists (an empty source element is the parser's).
func ps2Input(in libvirtxml.DomainInput) bool {
	if in.Source != nil && in.Source.Passthrough == nil && in.Source.EVDev == nil {
		in.Source = nil
	}
	return (in.Type == "mouse" || in.Type == "keyboard") && (in == libvirtxml.DomainInput{Type: in.Type, Bus: "ps2"})
}
