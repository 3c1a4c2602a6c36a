package libvirt

import (
	"context"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

// Volumes a failed migration's cleanup could not delete on its
// destination (the host dropped) are deleted after the host's next
// listing that shows no domain of that name; never while a domain of that
// name exists there, nor while a Create of the machine is booked there.
func TestLeftoverMigrationVolumesSwept(t *testing.T) {
	t.Parallel()
	b, pl := poolWithMachine(t)
	ctx := context.Background()
	c := hostConn(t, b, pl.Host)
	overlay := meta.OverlayName(pl.Domain)
	// A domain of that name is there: nothing is touched.
	b.leftover.add(pl.Host, pl.Domain, "m1")
	b.Inventory(ctx)
	if !volumeExists(t, c, b.cfg.Pool, overlay) || !domainExists(t, c, pl.Domain) {
		t.Fatal("the sweep touched a domain's volumes")
	}
	// The domain goes (as on a destination whose migration failed), the
	// machine still booked there: kept.
	if err := onDomain(lvc(c), pl.Domain, domstate.Destroy); err != nil {
		t.Fatal(err)
	}
	if err := onDomain(lvc(c), pl.Domain, domstate.Undefine); err != nil {
		t.Fatal(err)
	}
	b.loc.plan.Forget(pl.Zone, "m1")
	if _, err := b.loc.plan.Pin(pl.Zone, pl.Host, "m1", placement.Size{VCPUs: 1, MemoryMiB: 256}); err != nil {
		t.Fatal(err) // a Create of m1 booked there, its volumes in the making
	}
	b.Inventory(ctx)
	if !volumeExists(t, c, b.cfg.Pool, overlay) {
		t.Fatal("swept while a Create of the machine is booked on the host")
	}
	b.loc.plan.Forget(pl.Zone, "m1")
	b.Inventory(ctx)
	if volumeExists(t, c, b.cfg.Pool, overlay) {
		t.Fatal("the leftover overlay is still there after the listing")
	}
	if got := b.leftover.take(pl.Host); len(got) != 0 {
		t.Fatalf("entries left: %v", got)
	}
}

// The volumes of a machine that lives on another host of the zone, with
// no domain of that name here (a migration's source whose cleanup the
// provider's death cut, the lab soak's orphan), are found by the next
// listing and deleted; the machine's own volumes where it lives stay.
func TestOrphanVolumesOfAMachineElsewhereSwept(t *testing.T) {
	t.Parallel()
	b, pl := poolWithMachine(t)
	other := map[string]string{"a": "b", "b": "a"}[pl.Host]
	c := hostConn(t, b, other)
	p, err := c.LookupStoragePoolByName(b.cfg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	overlay := meta.OverlayName(pl.Domain)
	if _, err := volume.CreatePlain(lvp(p), overlay, 1<<20); err != nil {
		t.Fatal(err)
	}
	b.Inventory(context.Background())
	if volumeExists(t, c, b.cfg.Pool, overlay) {
		t.Fatalf("the orphan %s on %s survived a listing", overlay, other)
	}
	if !volumeExists(t, hostConn(t, b, pl.Host), b.cfg.Pool, overlay) {
		t.Fatalf("the machine's own overlay on %s was deleted", pl.Host)
	}
}
