package domxml

import (
	"encoding/xml"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
)

// Policy is what a domain we define may contain. libvirt's polkit rules
// can limit the provider's account to domains named bf-*, but not what such
// a domain holds: with domain.write it could point a disk at any host file,
// boot a host kernel or pass <qemu:commandline>. So every definition is
// checked against this allow-list before DomainDefineXML, and anything the
// provider does not itself generate is refused. A field of libvirtxml that
// is not named here is refused too, so new fields never slip through.
type Policy struct {
	Types []string // domain types the host may use
	Files []string // disk sources: this machine's overlay and seed
	// Backing are the files a rendered disk's backing chain may name: the
	// backing file of the machine's overlay as its pool reports it (the
	// golden image). Only CheckRendered reads it; a Create's definition
	// names no backing chain.
	Backing []string
	// NICs are the NICs a domain may have: each interface joins one of
	// their networks or bridges with that NIC's model (none: no NIC).
	NICs    []backend.NIC
	Kernel  string // --kernel/--initrd/--cmdline, exactly
	Initrd  string
	Cmdline string
	// Emulator is the host's default QEMU for the domain's arch and type,
	// from its capabilities: the one emulator a rendered domain may name
	// (checkRendered; Create names none and lets libvirt choose it).
	Emulator string
	// Shape is the instance type's machine shape: the firmware, NVRAM
	// template, SMM, TPM, CPU and huge pages it renders are allowed,
	// exactly as shapes.go and domainxml.go render them, and nothing
	// else of those kinds.
	Shape backend.Shape
}

// Check reports every way d strays from the policy.
func (p Policy) Check(d *libvirtxml.Domain) error {
	c := *d
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !slices.Contains(p.Types, c.Type) {
		bad("domain type %q", c.Type)
	}
	if !strings.HasPrefix(c.Name, "bf-") {
		bad("name %q lacks the bf- prefix", c.Name)
	}
	errs = append(errs, p.checkOS(c.OS), p.checkFeatures(c.Features), p.checkDevices(c.Devices),
		p.checkCPU(c.Type, c.CPU), p.checkMemoryBacking(c.MemoryBacking))
	c.XMLName, c.Type, c.Name, c.Metadata, c.Memory, c.VCPU = xml.Name{}, "", "", nil, nil, nil
	c.CPU, c.MemoryBacking = nil, nil
	c.OnPoweroff, c.OnReboot, c.OnCrash = "", "", ""
	c.OS, c.Features, c.Devices = nil, nil, nil
	if left := setFields(c); len(left) > 0 {
		bad("sets %s, which the provider never generates", strings.Join(left, ", "))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("domain XML refused by the definition policy: %w", err)
	}
	return nil
}

func (p Policy) checkOS(os *libvirtxml.DomainOS) error {
	if os == nil {
		return nil
	}
	c := *os
	var errs []error
	if c.Type == nil || c.Type.Type != "hvm" {
		errs = append(errs, errors.New("os type is not hvm"))
	}
	if c.Kernel != p.Kernel || c.Initrd != p.Initrd || c.Cmdline != p.Cmdline {
		errs = append(errs, fmt.Errorf("boots kernel %q initrd %q, not the configured --kernel/--initrd/--cmdline", c.Kernel, c.Initrd))
	}
	for _, bd := range c.BootDevices {
		if bd.Dev != "hd" {
			errs = append(errs, fmt.Errorf("boot device %q", bd.Dev))
		}
	}
	code, vars := FirmwareFiles(p.Shape.Firmware)
	if c.Type != nil {
		t := *c.Type
		if code != "" && t.Machine == UEFIMachine {
			t.Machine = ""
		}
		t.Type = ""
		if left := setFields(t); len(left) > 0 {
			errs = append(errs, fmt.Errorf("os type sets %s", strings.Join(left, ", ")))
		}
	}
	errs = append(errs, checkFirmware(p.Shape.Firmware, code, vars, c.Loader, c.NVRam))
	c.Type, c.Kernel, c.Initrd, c.Cmdline, c.BootDevices, c.Loader, c.NVRam = nil, "", "", "", nil, nil, nil
	if left := setFields(c); len(left) > 0 {
		errs = append(errs, fmt.Errorf("os sets %s", strings.Join(left, ", ")))
	}
	return errors.Join(errs...)
}

func (p Policy) checkFeatures(f *libvirtxml.DomainFeatureList) error {
	if f == nil {
		return nil
	}
	c := *f
	c.ACPI = nil
	if p.Shape.Firmware == backend.FirmwareUEFISecure && c.SMM != nil && *c.SMM == (libvirtxml.DomainFeatureSMM{State: "on"}) {
		c.SMM = nil // Secure Boot's
	}
	if left := setFields(c); len(left) > 0 {
		return fmt.Errorf("features set %s", strings.Join(left, ", "))
	}
	return nil
}

func (p Policy) checkDevices(dv *libvirtxml.DomainDeviceList) error {
	if dv == nil {
		return nil
	}
	c := *dv
	var errs []error
	for _, d := range c.Disks {
		errs = append(errs, p.checkDisk(d))
	}
	for _, n := range c.Interfaces {
		errs = append(errs, p.checkInterface(n))
	}
	for _, ch := range c.Channels {
		errs = append(errs, checkChannel(ch))
	}
	for _, sr := range c.Serials {
		errs = append(errs, checkSerial(sr))
	}
	for _, co := range c.Consoles {
		errs = append(errs, checkConsole(co))
	}
	errs = append(errs, p.checkTPMs(c.TPMs))
	c.Disks, c.Interfaces, c.Channels, c.Serials, c.Consoles, c.TPMs = nil, nil, nil, nil, nil, nil
	if left := setFields(c); len(left) > 0 {
		errs = append(errs, fmt.Errorf("devices include %s", strings.Join(left, ", ")))
	}
	return errors.Join(errs...)
}

func (p Policy) checkDisk(d libvirtxml.DomainDisk) error {
	if d.Device != "disk" || d.Source == nil || d.Source.File == nil || !slices.Contains(p.Files, d.Source.File.File) {
		src := "a non-file source"
		if d.Source != nil && d.Source.File != nil {
			src = d.Source.File.File
		}
		return fmt.Errorf("disk %s is not one of this machine's volumes", src)
	}
	c, src, file := d, *d.Source, *d.Source.File
	c.Device, c.Driver, c.Source, c.Target, c.ReadOnly, src.File, file.File = "", nil, nil, nil, nil, nil, ""
	left := append(append(setFields(c), setFields(src)...), setFields(file)...)
	if d.Driver != nil {
		drv := *d.Driver
		if drv.Name != "qemu" || (drv.Type != "qcow2" && drv.Type != "raw") {
			left = append(left, fmt.Sprintf("driver %s/%s", drv.Name, drv.Type))
		}
		drv.Name, drv.Type = "", ""
		left = append(left, setFields(drv)...)
	}
	if d.Target != nil {
		t := *d.Target
		if t.Bus != "virtio" {
			left = append(left, "bus "+t.Bus)
		}
		t.Dev, t.Bus = "", ""
		left = append(left, setFields(t)...)
	}
	if len(left) > 0 {
		return fmt.Errorf("disk %s sets %s", d.Source.File.File, strings.Join(left, ", "))
	}
	return nil
}

// checkInterface allows a NIC on one of the policy's networks or bridges,
// of the model the type gives it there, and nothing else of a NIC.
func (p Policy) checkInterface(n libvirtxml.DomainInterface) error {
	var on backend.NIC
	var left []string
	if n.Source != nil {
		src := *n.Source
		switch {
		case src.Network != nil:
			net := *src.Network
			on.Network, net.Network, src.Network = net.Network, "", nil
			left = setFields(net)
		case src.Bridge != nil:
			on.Bridge, src.Bridge = src.Bridge.Bridge, nil
		}
		left = append(left, setFields(src)...)
	}
	model := "virtio"
	if n.Model != nil {
		model = n.Model.Type
	}
	ok := on != (backend.NIC{}) && slices.ContainsFunc(p.NICs, func(a backend.NIC) bool {
		return a.Network == on.Network && a.Bridge == on.Bridge && nicModel(a) == model
	})
	if !ok {
		return fmt.Errorf("a NIC (network %q, bridge %q, model %q) that is none of the instance type's %v", on.Network, on.Bridge, model, p.NICs)
	}
	c := n
	c.Source, c.Model = nil, nil
	if left = append(left, setFields(c)...); len(left) > 0 {
		return fmt.Errorf("a NIC that sets %s", strings.Join(left, ", "))
	}
	return nil
}

// checkFirmware allows UEFI only as the shape asks: Debian's OVMF build
// of that firmware, read-only pflash (secure for Secure Boot), and a
// variable store copied from its template to a path libvirt chooses.
func checkFirmware(fw, code, vars string, l *libvirtxml.DomainLoader, nv *libvirtxml.DomainNVRam) error {
	if code == "" {
		if l != nil || nv != nil {
			return errors.New("a firmware loader or NVRAM the instance type does not ask for")
		}
		return nil
	}
	want := libvirtxml.DomainLoader{Path: code, Readonly: "yes", Type: "pflash"}
	if fw == backend.FirmwareUEFISecure {
		want.Secure = "yes"
	}
	if l == nil || *l != want {
		return fmt.Errorf("a firmware loader other than %s's %s", fw, code)
	}
	if nv == nil || nv.Source != nil || nv.NVRam != "" || nv.Template != vars || nv.Format != "" || nv.TemplateFormat != "" {
		return fmt.Errorf("NVRAM other than a copy of %s made by libvirt", vars)
	}
	return nil
}

// checkTPMs allows the shape's swtpm TPM 2.0 (tpm()) and no other TPM.
func (p Policy) checkTPMs(ts []libvirtxml.DomainTPM) error {
	if len(ts) == 0 {
		return nil
	}
	want := tpm()
	if !p.Shape.TPM || len(ts) > 1 || !reflect.DeepEqual(ts[0], want) {
		return errors.New("a TPM the instance type does not ask for (only one emulated TPM 2.0, tpm-crb)")
	}
	return nil
}

// checkCPU allows a <cpu> element only as the shape renders it.
func (p Policy) checkCPU(domType string, c *libvirtxml.DomainCPU) error {
	if c == nil {
		return nil
	}
	if want := cpuSection(Params{Type: domType, Shape: p.Shape}); want == nil || !reflect.DeepEqual(*c, *want) {
		return fmt.Errorf("a cpu element (mode %q) other than the instance type's", c.Mode)
	}
	return nil
}

// checkMemoryBacking allows huge pages of the shape's size, nothing else.
func (p Policy) checkMemoryBacking(m *libvirtxml.DomainMemoryBacking) error {
	if m == nil {
		return nil
	}
	if want := memoryBacking(p.Shape); want == nil || !reflect.DeepEqual(*m, *want) {
		return errors.New("memory backing other than the instance type's huge pages")
	}
	return nil
}

// checkChannel allows only the guest-agent channel, on a socket libvirt
// places itself (no path of our choosing on the host).
func checkChannel(ch libvirtxml.DomainChannel) error {
	if ch.Target == nil || ch.Target.VirtIO == nil || ch.Target.VirtIO.Name != AgentChannel ||
		ch.Source == nil || ch.Source.UNIX == nil || ch.Source.UNIX.Path != "" {
		return errors.New("a channel other than the guest agent's")
	}
	c, src, tgt := ch, *ch.Source, *ch.Target
	c.Source, c.Target, src.UNIX, tgt.VirtIO = nil, nil, nil, nil
	if left := append(append(setFields(c), setFields(src)...), setFields(tgt)...); len(left) > 0 {
		return fmt.Errorf("the agent channel sets %s", strings.Join(left, ", "))
	}
	return nil
}

func checkSerial(sr libvirtxml.DomainSerial) error {
	c := sr
	c.Source = nil
	var left []string
	if sr.Target != nil {
		t := *sr.Target
		t.Port = nil
		left = setFields(t)
		c.Target = nil
	}
	return ptyOnly("serial", sr.Source, append(left, setFields(c)...))
}

func checkConsole(co libvirtxml.DomainConsole) error {
	c := co
	c.Source = nil
	var left []string
	if co.Target != nil {
		t := *co.Target
		t.Port, t.Type = nil, ""
		left = setFields(t)
		c.Target = nil
	}
	return ptyOnly("console", co.Source, append(left, setFields(c)...))
}

// ptyOnly: a serial or console device on a pty libvirt allocates.
func ptyOnly(what string, src *libvirtxml.DomainChardevSource, left []string) error {
	if src == nil || src.Pty == nil || src.Pty.Path != "" {
		return fmt.Errorf("a %s that is not a pty", what)
	}
	c := *src
	c.Pty = nil
	if left = append(left, setFields(c)...); len(left) > 0 {
		return fmt.Errorf("a %s that sets %s", what, strings.Join(left, ", "))
	}
	return nil
}

// setFields names the fields of struct v that are not their zero value.
func setFields(v any) []string {
	rv := reflect.ValueOf(v)
	var out []string
	for i := range rv.NumField() {
		if f := rv.Type().Field(i); f.IsExported() && !rv.Field(i).IsZero() {
			out = append(out, f.Name)
		}
	}
	return out
}
