package libvirt

import (
	"context"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
)

// plantOverlay leaves on c, as a crashed migration would, an overlay of
// domain on the golden image whose virtual size (1 MiB) no fresh overlay
// has: if the migration reused it, the size would show it.
func plantOverlay(t *testing.T, c *libvirt.Connect, domain string) {
	t.Helper()
	pool, err := c.LookupStoragePoolByName("bigfleet")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	gv, err := pool.LookupStorageVolByName("golden.qcow2")
	if err != nil {
		t.Fatal(err)
	}
	defer gv.Free()
	gp, err := gv.GetPath()
	if err != nil {
		t.Fatal(err)
	}
	s, err := volume.OverlayXML(meta.OverlayName(domain), volume.Golden{Path: gp, Format: "qcow2", Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	v, err := pool.StorageVolCreateXML(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	v.Free()
}

func volumeCapacity(t *testing.T, c *libvirt.Connect, name string) uint64 {
	t.Helper()
	pool, err := c.LookupStoragePoolByName("bigfleet")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	v, err := pool.LookupStorageVolByName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Free()
	info, err := v.GetInfo()
	if err != nil {
		t.Fatal(err)
	}
	return info.Capacity
}

// An overlay an earlier, crashed migration left on the destination is never
// reused: with NON_SHARED_INC its stale blocks would survive under the
// guest. The migration deletes it and makes a fresh one.
func TestMigrateDestinationOverlayIsFresh(t *testing.T) {
	t.Parallel()
	b, _, pl := emulatedMigration(t)
	to := map[string]string{"a": "b", "b": "a"}[pl.Host]
	sc, dc := hostConn(t, b, pl.Host), hostConn(t, b, to)
	plantOverlay(t, dc, pl.Domain)
	want := volumeCapacity(t, sc, meta.OverlayName(pl.Domain))
	np, err := b.Migrate(context.Background(), backend.MigrateSpec{MachineID: "m1", Placement: pl, VCPU: 1, MemoryMiB: 512, ToHost: to})
	if err != nil {
		t.Fatal(err)
	}
	if got := volumeCapacity(t, dc, meta.OverlayName(np.Domain)); got != want {
		t.Fatalf("destination overlay is %d bytes, want a fresh one of %d: the leftover was reused", got, want)
	}
}

// A destination that has a domain of the machine's name is a copy for
// reconcile to judge: the migration refuses and touches neither the copy
// nor its volume.
func TestMigrateRefusesDestinationWithDomain(t *testing.T) {
	t.Parallel()
	b, _, pl := emulatedMigration(t)
	to := map[string]string{"a": "b", "b": "a"}[pl.Host]
	sc, dc := hostConn(t, b, pl.Host), hostConn(t, b, to)
	plantOverlay(t, dc, pl.Domain)
	x, err := domainXML(t, sc, pl.Domain).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	d, err := dc.DomainDefineXML(x)
	if err != nil {
		t.Fatal(err)
	}
	d.Free()
	_, err = b.Migrate(context.Background(), backend.MigrateSpec{MachineID: "m1", Placement: pl, VCPU: 1, MemoryMiB: 512, ToHost: to})
	if err == nil || !strings.Contains(err.Error(), "already has a domain named "+pl.Domain) {
		t.Fatalf("err = %v", err)
	}
	if !volumeExists(t, dc, "bigfleet", meta.OverlayName(pl.Domain)) || volumeCapacity(t, dc, meta.OverlayName(pl.Domain)) != 1<<20 {
		t.Fatal("the copy's volume was touched")
	}
	if !domainExists(t, sc, pl.Domain) {
		t.Fatal("the source lost its domain")
	}
}
