package domxml_test

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/domxml"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// The destination XML points the disks at the destination's volumes and
// carries our metadata naming the destination host; anything it cannot
// carry is refused.
func TestDestDomainXML(t *testing.T) {
	t.Parallel()
	d := domxml.Build(domxml.Params{Name: "bf-x", Type: "qemu", VCPU: 1, MemoryMiB: 128,
		Overlay: "/src/bf-x.qcow2", OverlayFmt: "qcow2", Seed: "/src/bf-x-seed.iso", Metadata: "<old/>"})
	// The source's rendering names its own golden image as the overlay's
	// backing; the destination reads its volume's own.
	d.Devices.Disks[0].BackingStore = &libvirtxml.DomainDiskBackingStore{Format: &libvirtxml.DomainDiskFormat{Type: "qcow2"},
		Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/src/golden.qcow2"}}}
	src, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	md, _ := meta.Metadata{Provider: "p", MachineID: "x", Host: "b"}.Marshal(true)
	out, err := domxml.DestXML(src, map[string]string{"/src/bf-x.qcow2": "/dst/bf-x.qcow2", "/src/bf-x-seed.iso": "/dst/bf-x-seed.iso"}, md, "qemu")
	if err != nil {
		t.Fatal(err)
	}
	var got libvirtxml.Domain
	if err := got.Unmarshal(out); err != nil {
		t.Fatal(err)
	}
	if f := got.Devices.Disks[0].Source.File.File; f != "/dst/bf-x.qcow2" {
		t.Errorf("overlay disk %s", f)
	}
	if b := got.Devices.Disks[0].BackingStore; b != nil {
		t.Errorf("the destination's overlay keeps the source's backing chain %+v", b.Source)
	}
	if f := got.Devices.Disks[1].Source.File.File; f != "/dst/bf-x-seed.iso" {
		t.Errorf("seed disk %s", f)
	}
	if back, err := meta.Decode(got.Metadata.XML); err != nil || back.Host != "b" || back.MachineID != "x" {
		t.Errorf("metadata %+v %v", back, err)
	}
	if _, err := domxml.DestXML(src, map[string]string{}, md, "qemu"); err == nil || !strings.Contains(err.Error(), "vda") {
		t.Errorf("unmapped writable disk: %v", err)
	}
	if _, err := domxml.DestXML(src, map[string]string{}, md, "kvm"); err == nil || !strings.Contains(err.Error(), "accelerator") {
		t.Errorf("other accelerator: %v", err)
	}
}
