package domxml

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
)

func policyParams() (Params, Policy) {
	p := Params{
		Name: "bf-p-m1-0a1b2c3d", Type: "kvm", VCPU: 2, MemoryMiB: 512,
		Overlay: "/var/lib/libvirt/pool/bf-p-m1-0a1b2c3d.qcow2", OverlayFmt: "qcow2",
		Seed: "/var/lib/libvirt/pool/bf-p-m1-0a1b2c3d-seed.iso", NICs: []backend.NIC{{Network: "bigfleet"}},
		Kernel: "/boot/guest/vmlinuz", Initrd: "/boot/guest/initrd.img", Cmdline: "console=ttyS0",
		Metadata: `<instance xmlns="urn:x"/>`,
	}
	pol := Policy{Types: []string{"kvm", "qemu"}, Files: []string{p.Overlay, p.Seed}, NICs: p.NICs,
		Kernel: p.Kernel, Initrd: p.Initrd, Cmdline: p.Cmdline}
	return p, pol
}

func TestPolicyAcceptsWhatWeGenerate(t *testing.T) {
	t.Parallel()
	p, pol := policyParams()
	if err := pol.Check(Build(p)); err != nil {
		t.Fatal(err)
	}
	p.Kernel, p.Initrd, p.Cmdline, p.Seed, p.NICs = "", "", "", "", nil
	pol.Kernel, pol.Initrd, pol.Cmdline, pol.NICs = "", "", "", nil
	if err := pol.Check(Build(p)); err != nil {
		t.Fatalf("disk boot, no seed, no NIC: %v", err)
	}
}

// TestPolicyRefusesTamperedDefinitions: what a compromised or buggy code
// path could put in a bf-* domain to reach the host is refused before
// DomainDefineXML.
func TestPolicyRefusesTamperedDefinitions(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		tamper func(p *Params, d *libvirtxml.Domain)
		want   string
	}{
		"host file as disk": {func(p *Params, d *libvirtxml.Domain) {
			d.Devices.Disks[0].Source.File.File = "/etc/shadow"
		}, "disk /etc/shadow is not one of this machine's volumes"},
		"extra host disk": {func(p *Params, d *libvirtxml.Domain) {
			d.Devices.Disks = append(d.Devices.Disks, fileDisk("/dev/sda", "raw", "vdc", false))
		}, "disk /dev/sda"},
		"block device": {func(p *Params, d *libvirtxml.Domain) {
			d.Devices.Disks[0].Source.File = nil
			d.Devices.Disks[0].Source.Block = &libvirtxml.DomainDiskSourceBlock{Dev: "/dev/sda"}
		}, "a non-file source"},
		"host kernel": {func(p *Params, d *libvirtxml.Domain) {
			d.OS.Kernel = "/boot/vmlinuz-6.1.0-host"
		}, "not the configured --kernel"},
		"qemu command line": {func(p *Params, d *libvirtxml.Domain) {
			d.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{Args: []libvirtxml.DomainQEMUCommandlineArg{{Value: "-fw_cfg"}}}
		}, "QEMUCommandline"},
		"host device": {func(p *Params, d *libvirtxml.Domain) {
			d.Devices.Hostdevs = []libvirtxml.DomainHostdev{{}}
		}, "devices include Hostdevs"},
		"shared filesystem": {func(p *Params, d *libvirtxml.Domain) {
			d.Devices.Filesystems = []libvirtxml.DomainFilesystem{{}}
		}, "Filesystems"},
		"direct NIC": {func(p *Params, d *libvirtxml.Domain) {
			d.Devices.Interfaces[0].Source = &libvirtxml.DomainInterfaceSource{Direct: &libvirtxml.DomainInterfaceSourceDirect{Dev: "eth0"}}
		}, "that is none of the instance type's"},
		"other network": {func(p *Params, d *libvirtxml.Domain) {
			d.Devices.Interfaces[0].Source.Network.Network = "host-lan"
		}, "that is none of the instance type's"},
		"agent socket path": {func(p *Params, d *libvirtxml.Domain) {
			d.Devices.Channels[0].Source.UNIX.Path = "/run/libvirt/libvirt-sock"
		}, "other than the guest agent's"},
		"serial to a file": {func(p *Params, d *libvirtxml.Domain) {
			d.Devices.Serials[0].Source = &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: "/etc/cron.d/x"}}
		}, "serial that is not a pty"},
		"no confinement": {func(p *Params, d *libvirtxml.Domain) {
			d.SecLabel = []libvirtxml.DomainSecLabel{{Type: "none"}}
		}, "SecLabel"},
		"graphics": {func(p *Params, d *libvirtxml.Domain) {
			d.Devices.Graphics = []libvirtxml.DomainGraphic{{}}
		}, "Graphics"},
		"xen":          {func(p *Params, d *libvirtxml.Domain) { d.Type = "xen" }, `domain type "xen"`},
		"foreign name": {func(p *Params, d *libvirtxml.Domain) { d.Name = "prod-db" }, "bf- prefix"},
		"emulator":     {func(p *Params, d *libvirtxml.Domain) { d.Devices.Emulator = "/tmp/evil" }, "Emulator"},
		"disk cache option": {func(p *Params, d *libvirtxml.Domain) {
			d.Devices.Disks[0].Driver.Cache = "unsafe"
		}, "Cache"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, pol := policyParams()
			d := Build(p)
			tc.tamper(&p, d)
			err := pol.Check(d)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "domain XML refused by the definition policy: ") {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
