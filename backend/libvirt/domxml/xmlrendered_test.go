package domxml

import (
	"os"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
)

// testdata/migratable-qemu.xml is the migratable XML the system libvirtd
// (libvirt 9, QEMU 7.2, a kvm-capable host) rendered for a domain our
// Create defined (migratepolicy_real_test.go writes it).
func renderedQEMU(t *testing.T) (*libvirtxml.Domain, Policy) {
	t.Helper()
	b, err := os.ReadFile("testdata/migratable-qemu.xml")
	if err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(string(b)); err != nil {
		t.Fatal(err)
	}
	return &d, Policy{
		Types:    []string{"kvm"},
		Files:    []string{"/var/lib/libvirt/bigfleet-pool/bf-realxml-polx1-297b0d63.qcow2"},
		NICs:     []backend.NIC{{Network: "bigfleet"}},
		Kernel:   "/var/lib/libvirt/bigfleet-boot/vmlinuz",
		Initrd:   "/var/lib/libvirt/bigfleet-boot/initrd.img",
		Cmdline:  "console=ttyS0 panic=-1 quiet",
		Emulator: "/usr/bin/qemu-system-x86_64",
	}
}

func TestCheckRenderedAcceptsLibvirtsRendering(t *testing.T) {
	t.Parallel()
	d, p := renderedQEMU(t)
	if err := p.CheckRendered(d); err != nil {
		t.Fatal(err)
	}
	// The strict check of a Create would refuse it: what is accepted is
	// libvirt's own additions, nothing else.
	if err := p.Check(d); err == nil {
		t.Fatal("the Create check accepted a rendered domain")
	}
}

// Each change an attacker with domain.write on the source could make, and
// libvirt never renders for our domains, is refused.
func TestCheckRenderedRefuses(t *testing.T) {
	t.Parallel()
	u := func(n uint) *uint { return &n }
	cases := map[string]struct {
		edit func(*libvirtxml.Domain)
		want string
	}{
		"another emulator": {func(d *libvirtxml.Domain) { d.Devices.Emulator = "/tmp/evil" }, "Emulator"},
		"a host file as a read-only disk": {func(d *libvirtxml.Domain) {
			d.Devices.Disks = append(d.Devices.Disks, libvirtxml.DomainDisk{Device: "disk", ReadOnly: &libvirtxml.DomainDiskReadOnly{},
				Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/etc/shadow"}},
				Target: &libvirtxml.DomainDiskTarget{Dev: "vdz", Bus: "virtio"}})
		}, "/etc/shadow"},
		"qemu command line": {func(d *libvirtxml.Domain) {
			d.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{Args: []libvirtxml.DomainQEMUCommandlineArg{{Value: "-foo"}}}
		}, "QEMUCommandline"},
		"host kernel": {func(d *libvirtxml.Domain) { d.OS.Kernel = "/boot/vmlinuz" }, "kernel"},
		"host passthrough CPU": {func(d *libvirtxml.Domain) {
			d.CPU = &libvirtxml.DomainCPU{Mode: "host-passthrough"}
		}, "cpu element"},
		"static security label": {func(d *libvirtxml.Domain) {
			d.SecLabel = []libvirtxml.DomainSecLabel{{Type: "static", Model: "selinux", Label: "system_u:system_r:unconfined_t:s0"}}
		}, "SecLabel"},
		"tap of our choosing": {func(d *libvirtxml.Domain) {
			d.Devices.Interfaces[0].Target = &libvirtxml.DomainInterfaceTarget{Dev: "eth0"}
		}, "Target"},
		"a hostdev": {func(d *libvirtxml.Domain) {
			d.Devices.Hostdevs = []libvirtxml.DomainHostdev{{SubsysPCI: &libvirtxml.DomainHostdevSubsysPCI{}}}
		}, "Hostdevs"},
		"a SCSI controller": {func(d *libvirtxml.Domain) {
			d.Devices.Controllers = append(d.Devices.Controllers, libvirtxml.DomainController{Type: "scsi", Index: u(0)})
		}, "Controllers"},
		"a drive address": {func(d *libvirtxml.Domain) {
			d.Devices.Disks[0].Address = &libvirtxml.DomainAddress{Drive: &libvirtxml.DomainAddressDrive{}}
		}, "Address"},
		"a balloon with stats": {func(d *libvirtxml.Domain) {
			d.Devices.MemBalloon.Stats = &libvirtxml.DomainMemBalloonStats{Period: 1}
		}, "MemBalloon"},
		"another partition":   {func(d *libvirtxml.Domain) { d.Resource.Partition = "/other" }, "Resource"},
		"less current memory": {func(d *libvirtxml.Domain) { d.CurrentMemory.Value = 1024 }, "CurrentMemory"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d, p := renderedQEMU(t)
			tc.edit(d)
			err := p.CheckRendered(d)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestCheckRenderedBackingChain: the backing chain libvirt renders for the
// overlay (the golden image it read in the qcow2 header) is libvirt's, and
// accepted when it names the overlay's backing file as the pool reports
// it; a chain naming any other file, or setting anything else, is refused.
func TestCheckRenderedBackingChain(t *testing.T) {
	t.Parallel()
	const golden = "/var/lib/libvirt/bigfleet-pool/bigfleet-golden.qcow2"
	chain := func(file string) *libvirtxml.DomainDiskBackingStore {
		return &libvirtxml.DomainDiskBackingStore{Index: 1, Format: &libvirtxml.DomainDiskFormat{Type: "qcow2"},
			Source:       &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: file}},
			BackingStore: &libvirtxml.DomainDiskBackingStore{}}
	}
	cases := map[string]struct {
		chain  *libvirtxml.DomainDiskBackingStore
		accept bool
	}{
		"the golden image": {chain(golden), true},
		"another file":     {chain("/etc/shadow"), false},
		"a second level": {func() *libvirtxml.DomainDiskBackingStore {
			c := chain(golden)
			c.BackingStore = chain("/etc/shadow")
			return c
		}(), false},
		"a startup policy": {func() *libvirtxml.DomainDiskBackingStore {
			c := chain(golden)
			c.Source.StartupPolicy = "optional"
			return c
		}(), false},
		"a luks format":    {func() *libvirtxml.DomainDiskBackingStore { c := chain(golden); c.Format.Type = "luks"; return c }(), false},
		"a network source": {&libvirtxml.DomainDiskBackingStore{Source: &libvirtxml.DomainDiskSource{Network: &libvirtxml.DomainDiskSourceNetwork{Protocol: "nbd"}}}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d, p := renderedQEMU(t)
			p.Backing = []string{golden}
			d.Devices.Disks[0].BackingStore = tc.chain
			err := p.CheckRendered(d)
			if tc.accept && err != nil {
				t.Fatalf("libvirt's probed chain refused: %v", err)
			}
			if !tc.accept && (err == nil || !strings.Contains(err.Error(), "BackingStore")) {
				t.Fatalf("err = %v, want one naming BackingStore", err)
			}
		})
	}
	// Without the overlay's backing file known, no chain is libvirt's.
	d, p := renderedQEMU(t)
	d.Devices.Disks[0].BackingStore = chain(golden)
	if err := p.CheckRendered(d); err == nil {
		t.Fatal("a chain accepted with no backing file allowed")
	}
}
