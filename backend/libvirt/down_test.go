package libvirt

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

// Issue 38: a host declared down takes no placement, no call on its
// domains; a Delete of its machine completes without it; its listing
// counts as listed with nothing running, and the copies it still holds
// come up as Fenced, destroyed only through DestroyFenced.
func TestHostDeclaredDown(t *testing.T) {
	t.Parallel()
	b, pl := poolWithMachine(t)
	ctx := context.Background()
	other := map[string]string{"a": "b", "b": "a"}[pl.Host]
	if err := b.SetDown("nope", true, "x"); !errors.Is(err, backend.ErrUnknownHost) {
		t.Fatalf("SetDown of an unknown host: %v", err)
	}
	if err := b.SetDown(pl.Host, true, ""); err == nil {
		t.Fatal("SetDown without a reason was accepted")
	}
	if err := b.SetDown(pl.Host, true, "PSU failed"); err != nil {
		t.Fatal(err)
	}
	for _, st := range b.Hosts(ctx) {
		if (st.Name == pl.Host) != st.Down || (st.Down && st.DownReason != "PSU failed") {
			t.Fatalf("host status %s: down %v %q", st.Name, st.Down, st.DownReason)
		}
	}
	// No placement: every new machine goes to the other host.
	for _, id := range []string{"m2", "m3"} {
		p, err := b.Create(ctx, sized(id, 1, 256))
		if err != nil || p.Host != other {
			t.Fatalf("Create %s with %s down: %v on %q", id, pl.Host, err, p.Host)
		}
	}
	// No call on its domains: a Configure fails at once, naming it.
	err := b.Configure(ctx, configureSpec(pl, "m1", "c1", []byte("blob")))
	if !errors.Is(err, backend.ErrHostDown) || backend.IsTransient(err) || !strings.Contains(err.Error(), "declared down: PSU failed") {
		t.Fatalf("Configure on a host declared down: %v", err)
	}
	// Readiness: the zone and the machine's placement are ready (a Delete
	// must be accepted).
	if err := b.PlacementReady(pl); err != nil {
		t.Fatalf("PlacementReady of a machine on a down host: %v", err)
	}
	// Its listing: listed, nothing running, the copy handed up as fenced.
	var zi backend.ZoneInventory
	for _, z := range b.Inventory(ctx) {
		if z.Zone == "z1" {
			zi = z
		}
	}
	if zi.Err != nil || zi.Down[pl.Host] != "PSU failed" || len(zi.Unlisted) != 0 || !contains(strings.Join(zi.Hosts, ","), pl.Host) {
		t.Fatalf("listing: err %v down %v hosts %v unlisted %v", zi.Err, zi.Down, zi.Hosts, zi.Unlisted)
	}
	for _, o := range zi.Machines {
		if o.Placement.Host == pl.Host {
			t.Fatalf("a copy on the down host counted as the machine: %+v", o)
		}
	}
	if len(zi.Fenced) != 1 || zi.Fenced[0].MachineID != "m1" || zi.Fenced[0].Placement.Host != pl.Host {
		t.Fatalf("fenced %+v; want m1's copy on %s", zi.Fenced, pl.Host)
	}
	// A Delete completes without touching the down host.
	if err := b.Delete(ctx, backend.DeleteSpec{MachineID: "m1", OperationID: "op-del", Zone: "z1", Placement: pl}); err != nil {
		t.Fatalf("Delete of a machine on a down host: %v", err)
	}
	c := hostConn(t, b, pl.Host)
	if !domainExists(t, c, pl.Domain) {
		t.Fatal("the Delete touched the down host")
	}
	if !isActive(t, c, pl.Domain) {
		t.Fatal("the copy on the down host was stopped by the Delete")
	}
	// The fenced rejoin destroys it, only while the host is declared down.
	if err := b.DestroyFenced(ctx, "m1", backend.Placement{Zone: "z1", Host: other, Domain: pl.Domain}); err == nil {
		t.Fatal("DestroyFenced on a host that is not declared down was accepted")
	}
	if err := b.DestroyFenced(ctx, "m1", pl); err != nil {
		t.Fatal(err)
	}
	if domainExists(t, c, pl.Domain) {
		t.Fatal("DestroyFenced left the domain")
	}
	if err := b.SetDown(pl.Host, false, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.ZoneReady("z1"); err != nil {
		t.Fatal(err)
	}
	p, err := b.Create(ctx, sized("m4", 1, 256))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the declaration ended, m4 placed on %s", p.Host)
}

// A zone whose only hosts are one declared down and one unreachable is
// not ready: a Create there would have no host to go to (the soak saw
// such Creates accepted and FAILED at once), nor one whose every host is
// declared down; a machine on a host declared down still is (HostReady).
func TestZoneWithOnlyADownAndAnUnreachableHostIsNotReady(t *testing.T) {
	t.Parallel()
	b := poolBackend(t, func(c *Config) {
		c.Hosts = []Host{c.Hosts[0], {Zone: "z1", URI: "qemu+unix:///system?socket=/nonexistent/bf.sock", Name: "c", Named: true, Enforce: true}}
	})
	up := b.loc.zoned["z1"][0].name
	if err := b.ZoneReady("z1"); err != nil {
		t.Fatalf("zone with %s up: %v", up, err)
	}
	if err := b.SetDown(up, true, "PSU failed"); err != nil {
		t.Fatal(err)
	}
	if err := b.ZoneReady("z1"); err == nil {
		t.Fatalf("zone ready with %s declared down and c unreachable", up)
	}
	if err := b.SetDown("c", true, "PSU failed too"); err != nil {
		t.Fatal(err)
	}
	if err := b.ZoneReady("z1"); !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("zone with every host declared down: %v; want unavailable (no host takes a Create)", err)
	}
	// A machine of a host declared down is still answered (its Delete).
	if err := b.HostReady("z1", up); err != nil {
		t.Fatalf("HostReady of a host declared down: %v", err)
	}
}
