package libvirt

import (
	"context"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
)

// stampGolden gives the golden image the modification time libvirt
// reports on a real host (the test driver reports none), the same on
// every host: one image distributed with its timestamp kept.
func stampGolden(name, x string) string {
	if name != "golden.qcow2" {
		return x
	}
	return strings.Replace(x, "</target>", "<timestamps><mtime>1796372634.913613625</mtime></timestamps></target>", 1)
}

// A destination whose golden image has the same name but not the same
// identity (here: another size) gets the whole disk, never an overlay on
// it: NON_SHARED_INC would leave the other image's blocks under the guest.
func TestMigrateGoldenDiffersCopiesWholeDisk(t *testing.T) {
	t.Parallel()
	b, f, pl := emulatedMigration(t)
	to := map[string]string{"a": "b", "b": "a"}[pl.Host]
	dc := hostConn(t, b, to)
	pool, err := dc.LookupStoragePoolByName("bigfleet")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	old, err := pool.LookupStorageVolByName("golden.qcow2")
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Delete(0); err != nil {
		t.Fatal(err)
	}
	old.Free()
	v, err := pool.StorageVolCreateXML(`<volume><name>golden.qcow2</name><capacity unit="bytes">134217728</capacity><target><format type="qcow2"/></target></volume>`, 0)
	if err != nil {
		t.Fatal(err)
	}
	v.Free()
	if _, err := b.Migrate(context.Background(), backend.MigrateSpec{MachineID: "m1", Placement: pl, VCPU: 1, MemoryMiB: 512, ToHost: to}); err != nil {
		t.Fatal(err)
	}
	if len(f.migrated) != 1 || f.migrated[0]&libvirt.MIGRATE_NON_SHARED_DISK == 0 || f.migrated[0]&libvirt.MIGRATE_NON_SHARED_INC != 0 {
		t.Fatalf("flags %v: want a whole-disk copy", f.migrated)
	}
	if back := domainXML(t, dc, pl.Domain).Devices.Disks[0]; back.BackingStore != nil && back.BackingStore.Source != nil {
		t.Errorf("the destination disk is backed by %+v", back.BackingStore.Source)
	}
}
