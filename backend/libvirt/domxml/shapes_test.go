package domxml

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
)

// fullShape is every shape field at once.
func fullShape() backend.Shape {
	return backend.Shape{DiskGiB: 8, Firmware: backend.FirmwareUEFISecure, TPM: true,
		CPU:         backend.CPUShape{Sockets: 1, Cores: 2, Threads: 1},
		HugePageKiB: 2048,
		NICs:        []backend.NIC{{Network: "bigfleet"}, {Bridge: "br0", Model: "e1000e"}}}
}

func shapedParams() (Params, Policy) {
	p, pol := policyParams()
	p.Kernel, p.Initrd, p.Cmdline = "", "", ""
	pol.Kernel, pol.Initrd, pol.Cmdline = "", "", ""
	p.Shape, pol.Shape = fullShape(), fullShape()
	p.NICs, pol.NICs = ResolvedNICs(p.Shape, "ignored"), ResolvedNICs(pol.Shape, "ignored")
	return p, pol
}

// The XML a shape renders, element by element, as libvirt reads it.
func TestShapeRendersXML(t *testing.T) {
	t.Parallel()
	p, pol := shapedParams()
	d := Build(p)
	if err := pol.Check(d); err != nil {
		t.Fatalf("the policy refuses the shape's own domain: %v", err)
	}
	x, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<type machine="q35">hvm</type>`,
		`<loader readonly="yes" secure="yes" type="pflash">/usr/share/OVMF/OVMF_CODE_4M.secboot.fd</loader>`,
		`<nvram template="/usr/share/OVMF/OVMF_VARS_4M.ms.fd"></nvram>`,
		`<smm state="on"></smm>`,
		`<cpu mode="host-passthrough">`, `<topology sockets="1" cores="2" threads="1"></topology>`,
		`<hugepages>`, `<page size="2048" unit="KiB"></page>`,
		`<tpm model="tpm-crb">`, `<backend type="emulator" version="2.0">`,
		`<source network="bigfleet"></source>`, `<model type="virtio"></model>`,
		`<source bridge="br0"></source>`, `<model type="e1000e"></model>`,
	} {
		if !strings.Contains(x, want) {
			t.Errorf("domain XML lacks %s:\n%s", want, x)
		}
	}
	// Plain UEFI: no secure flag, no SMM, the plain template.
	p.Shape.Firmware = backend.FirmwareUEFI
	x, _ = Build(p).Marshal()
	if !strings.Contains(x, `<loader readonly="yes" type="pflash">/usr/share/OVMF/OVMF_CODE_4M.fd</loader>`) ||
		!strings.Contains(x, `template="/usr/share/OVMF/OVMF_VARS_4M.fd"`) || strings.Contains(x, "smm") {
		t.Errorf("uefi:\n%s", x)
	}
	// Under TCG a CPU without a model is the hypervisor's (no host-passthrough).
	p.Type = "qemu"
	if c := cpuSection(p); c.Mode != "" || c.Topology == nil {
		t.Errorf("qemu cpu = %+v", c)
	}
	p.Shape.CPU = backend.CPUShape{Model: "Haswell-noTSX"}
	if c := cpuSection(p); c.Mode != "custom" || c.Match != "exact" || c.Model.Value != "Haswell-noTSX" || c.Model.Fallback != "forbid" || c.Topology != nil {
		t.Errorf("named model cpu = %+v", c)
	}
	// The zero shape renders as before shapes: one virtio NIC on --network.
	p.Shape = backend.Shape{}
	p.NICs = ResolvedNICs(p.Shape, "default")
	d = Build(p)
	if d.CPU != nil || d.MemoryBacking != nil || d.OS.Loader != nil || d.OS.NVRam != nil || d.Features.SMM != nil ||
		d.Devices.TPMs != nil || len(d.Devices.Interfaces) != 1 || d.OS.Type.Machine != "" {
		t.Errorf("zero shape renders %+v", d)
	}
	if n := ResolvedNICs(backend.Shape{NICs: []backend.NIC{}}, "default"); len(n) != 0 {
		t.Errorf(`"network": [] gives NICs %v`, n)
	}
}

// The allow-list takes a shape's elements only exactly as the shape
// renders them: anything else of those kinds is still refused, and a
// plain type's policy refuses all of them.
func TestPolicyRefusesOutsideTheShape(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		tamper func(d *libvirtxml.Domain)
		want   string
	}{
		"loader from a host file": {func(d *libvirtxml.Domain) { d.OS.Loader.Path = "/etc/shadow" }, "firmware loader other than"},
		"loader writable":         {func(d *libvirtxml.Domain) { d.OS.Loader.Readonly = "no" }, "firmware loader other than"},
		"nvram at a chosen path":  {func(d *libvirtxml.Domain) { d.OS.NVRam.NVRam = "/root/.ssh/authorized_keys" }, "NVRAM other than"},
		"nvram from a host file":  {func(d *libvirtxml.Domain) { d.OS.NVRam.Template = "/etc/shadow" }, "NVRAM other than"},
		"other machine type":      {func(d *libvirtxml.Domain) { d.OS.Type.Machine = "pc-i440fx-7.2" }, "os type sets Machine"},
		"tpm passthrough": {func(d *libvirtxml.Domain) {
			d.Devices.TPMs[0].Backend = &libvirtxml.DomainTPMBackend{Passthrough: &libvirtxml.DomainTPMBackendPassthrough{
				Device: &libvirtxml.DomainTPMBackendDevice{Path: "/dev/tpm0"}}}
		}, "a TPM the instance type does not ask for"},
		"two TPMs":  {func(d *libvirtxml.Domain) { d.Devices.TPMs = append(d.Devices.TPMs, tpm()) }, "a TPM the instance"},
		"other cpu": {func(d *libvirtxml.Domain) { d.CPU.Mode = "host-model" }, "a cpu element"},
		"cpu with features": {func(d *libvirtxml.Domain) {
			d.CPU.Features = []libvirtxml.DomainCPUFeature{{Policy: "disable", Name: "smep"}}
		}, "a cpu element"},
		"other huge pages":      {func(d *libvirtxml.Domain) { d.MemoryBacking.MemoryHugePages.Hugepages[0].Size = 1 << 20 }, "memory backing"},
		"locked memory":         {func(d *libvirtxml.Domain) { d.MemoryBacking.MemoryLocked = &libvirtxml.DomainMemoryLocked{} }, "memory backing"},
		"NIC on another bridge": {func(d *libvirtxml.Domain) { d.Devices.Interfaces[1].Source.Bridge.Bridge = "virbr9" }, `bridge "virbr9"`},
		"NIC of another model":  {func(d *libvirtxml.Domain) { d.Devices.Interfaces[0].Model.Type = "e1000" }, `model "e1000"`},
		"direct NIC": {func(d *libvirtxml.Domain) {
			d.Devices.Interfaces[0].Source = &libvirtxml.DomainInterfaceSource{Direct: &libvirtxml.DomainInterfaceSourceDirect{Dev: "eth0"}}
		}, "none of the instance type's"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, pol := shapedParams()
			d := Build(p)
			tc.tamper(d)
			if err := pol.Check(d); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	// A plain type's policy refuses a shaped domain outright.
	p, _ := shapedParams()
	_, plain := policyParams()
	plain.Kernel, plain.Initrd, plain.Cmdline = "", "", ""
	err := plain.Check(Build(p))
	for _, want := range []string{"firmware loader or NVRAM", "features set SMM", "a TPM", "a cpu element", "memory backing", `bridge "br0"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("plain policy on a shaped domain: %v, want %q", err, want)
		}
	}
	// SMM without Secure Boot is not the shape's either.
	p.Shape.Firmware = backend.FirmwareUEFI
	pol := Policy{Types: []string{"kvm"}, Files: []string{p.Overlay, p.Seed}, NICs: p.NICs, Shape: p.Shape}
	d := Build(p)
	d.Features.SMM = &libvirtxml.DomainFeatureSMM{State: "on"}
	if err := pol.Check(d); err == nil || !strings.Contains(err.Error(), "SMM") {
		t.Errorf("SMM on plain uefi: %v", err)
	}
}

func TestShapedDomainsAreSeen(t *testing.T) {
	t.Parallel()
	p, _ := shapedParams()
	if !Shaped(Build(p)) {
		t.Fatal("a shaped domain not seen as shaped")
	}
	p, _ = policyParams()
	if Shaped(Build(p)) {
		t.Fatal("a plain domain seen as shaped")
	}
}
