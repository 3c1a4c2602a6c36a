package libvirt

import (
	"context"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
)

// A source domain redefined (by anyone with domain.write on the source)
// to read a host file is not carried to the destination: the migration
// is refused by the definition policy before any libvirt call that
// changes the destination, and the guest keeps running where it is.
func TestMigrateRefusesDisallowedDestinationXML(t *testing.T) {
	t.Parallel()
	b, f, pl := emulatedMigration(t)
	sc := hostConn(t, b, pl.Host)
	d := domainXML(t, sc, pl.Domain)
	d.Devices.Disks = append(d.Devices.Disks, libvirtxml.DomainDisk{Device: "disk", ReadOnly: &libvirtxml.DomainDiskReadOnly{},
		Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
		Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/etc/shadow"}},
		Target: &libvirtxml.DomainDiskTarget{Dev: "vdz", Bus: "virtio"}})
	x, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	dom, err := sc.DomainDefineXML(x)
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Free()
	if err := dom.Destroy(); err != nil { // the live definition is the one migrated
		t.Fatal(err)
	}
	if err := dom.Create(); err != nil {
		t.Fatal(err)
	}
	before := len(f.mutations())
	to := map[string]string{"a": "b", "b": "a"}[pl.Host]
	_, err = b.Migrate(context.Background(), backend.MigrateSpec{MachineID: "m1", Placement: pl, VCPU: 1, MemoryMiB: 512, ToHost: to})
	if err == nil || !strings.Contains(err.Error(), "definition policy") || !strings.Contains(err.Error(), "/etc/shadow") {
		t.Fatalf("err = %v, want a refusal by the definition policy naming /etc/shadow", err)
	}
	if m := f.mutations()[before:]; len(m) != 0 {
		t.Errorf("libvirt work despite the refusal: %v", m)
	}
	if !domainExists(t, sc, pl.Domain) || domainExists(t, hostConn(t, b, to), pl.Domain) {
		t.Error("the domain moved")
	}
}
