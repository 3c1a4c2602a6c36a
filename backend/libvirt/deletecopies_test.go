package libvirt

import (
	"context"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// plantCopy defines and starts on host the domain of pl (its XML as the
// other host holds it): a copy a crash or a cut migration left there.
func plantCopy(t *testing.T, b *Backend, pl backend.Placement, host string) {
	t.Helper()
	src := hostConn(t, b, pl.Host)
	dom, err := src.LookupDomainByName(pl.Domain)
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Free()
	xml, err := dom.GetXMLDesc(0)
	if err != nil {
		t.Fatal(err)
	}
	copyDom, err := hostConn(t, b, host).DomainDefineXML(xml)
	if err != nil {
		t.Fatal(err)
	}
	defer copyDom.Free()
	if err := copyDom.Create(); err != nil {
		t.Fatal(err)
	}
}

// Issue 31 case 2: a Delete removes the machine's copy on the zone's other
// host too, so no node of it outlives the Delete BigFleet saw succeed.
func TestDeleteRemovesCopiesOnTheZonesOtherHosts(t *testing.T) {
	t.Parallel()
	b, pl := poolWithMachine(t)
	other := map[string]string{"a": "b", "b": "a"}[pl.Host]
	plantCopy(t, b, pl, other)
	if err := b.Delete(context.Background(), backend.DeleteSpec{MachineID: "m1", OperationID: "op-del", Zone: "z1", Placement: pl}); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{pl.Host, other} {
		if domainExists(t, hostConn(t, b, h), pl.Domain) {
			t.Errorf("%s still holds %s after the Delete", h, pl.Domain)
		}
	}
}

// Issue 38 case 4: a host of the zone that cannot be reached does not
// hold a Delete of a machine on a healthy host up (it used to fail every
// Delete in the zone until --delete-timeout made it FAILED): the Delete
// completes with a WARN naming the host, and a copy there, if any, is the
// Delete's leftover that reconcile removes once the host is listed.
func TestDeleteCompletesWithAnUnreachableHostOfTheZone(t *testing.T) {
	t.Parallel()
	b := poolBackend(t, func(c *Config) {
		c.Hosts = append(c.Hosts, Host{Zone: "z1", URI: "qemu+unix:///system?socket=/nonexistent/bf.sock", Name: "c", Named: true, Enforce: true})
	})
	ctx := context.Background()
	pl, err := b.Create(ctx, sized("m1", 1, 512))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, backend.DeleteSpec{MachineID: "m1", OperationID: "op-del", Zone: "z1", Placement: pl}); err != nil {
		t.Fatalf("Delete with host c unreachable: %v; want it to complete", err)
	}
	if domainExists(t, hostConn(t, b, pl.Host), pl.Domain) {
		t.Fatalf("the reachable copy on %s was not removed", pl.Host)
	}
	if h, ok := b.loc.plan.HostOf("z1", "m1"); ok {
		t.Errorf("m1 still booked on %s after its domain there was removed", h)
	}
}

// A stranger's domain under the machine's name on another host of the zone
// is not a copy: the Delete succeeds and leaves it as it was.
func TestDeleteLeavesAStrangersDomainOnTheOtherHost(t *testing.T) {
	t.Parallel()
	b, pl := poolWithMachine(t)
	other := map[string]string{"a": "b", "b": "a"}[pl.Host]
	c := hostConn(t, b, other)
	defineStranger(t, c, pl.Domain, &meta.Metadata{Provider: "someone-else", MachineID: "m1"})
	if err := b.Delete(context.Background(), backend.DeleteSpec{MachineID: "m1", OperationID: "op-del", Zone: "z1", Placement: pl}); err != nil {
		t.Fatalf("Delete with a stranger's domain of the same name on %s: %v", other, err)
	}
	if domainExists(t, hostConn(t, b, pl.Host), pl.Domain) {
		t.Errorf("%s still holds our %s after the Delete", pl.Host, pl.Domain)
	}
	if !domainExists(t, c, pl.Domain) {
		t.Errorf("the stranger's %s on %s was removed", pl.Domain, other)
	}
}
