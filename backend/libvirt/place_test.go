package libvirt

import (
	"context"
	"errors"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// hasDomain reports whether host name holds domain dom.
func hasDomain(t *testing.T, b *Backend, name, dom string) bool {
	t.Helper()
	err := b.loc.hosts[name].WithDomain(dom, func(virt.Conn, virt.Domain) error { return nil })
	if err != nil && !isNoDomain(err) {
		t.Fatal(err)
	}
	return err == nil
}

// Place books without building; the same machine keeps its host, and
// Unplace frees the room.
func TestPlaceBooksOnly(t *testing.T) {
	t.Parallel()
	b := poolBackend(t, nil)
	pl, err := b.Place(sized("m1", 1, 512))
	if err != nil || pl.Host != "b" || pl.Why == "" || pl.Domain != meta.DomainName(b.cfg.Provider, "m1") {
		t.Fatalf("Place: %+v %v; want host b (most memory) with a reason", pl, err)
	}
	if hasDomain(t, b, "b", pl.Domain) {
		t.Fatal("Place built a domain")
	}
	if again, _ := b.Place(sized("m1", 1, 512)); again.Host != "b" {
		t.Fatalf("a booked machine moved to %q", again.Host)
	}
	if _, u, _ := b.loc.plan.Get("b"); u.Machines != 1 {
		t.Fatalf("books of b: %+v", u)
	}
	b.Unplace("z1", "m1")
	if _, u, _ := b.loc.plan.Get("b"); u.Machines != 0 {
		t.Fatalf("books of b after Unplace: %+v", u)
	}
}

// A Create with a recorded host goes there, cordoned or not, although the
// policy would choose the other host.
func TestCreateGoesToRecordedHost(t *testing.T) {
	t.Parallel()
	b := poolBackend(t, nil)
	if err := b.SetCordoned("a", true); err != nil {
		t.Fatal(err)
	}
	s := sized("m1", 1, 512)
	s.Host = "a"
	pl, err := b.Create(context.Background(), s)
	if err != nil || pl.Host != "a" {
		t.Fatalf("Create with recorded host a: %+v %v", pl, err)
	}
	if !hasDomain(t, b, "a", pl.Domain) || hasDomain(t, b, "b", pl.Domain) {
		t.Fatal("the domain is not on a alone")
	}
	if pl2, err := b.Create(context.Background(), s); err != nil || pl2.Host != "a" { // a retry adopts it there
		t.Fatalf("retried Create: %+v %v", pl2, err)
	}
}

// A recorded host that left the configuration: placed again only once
// every host of the zone says there is no domain.
func TestCreateRecordedHostGone(t *testing.T) {
	t.Parallel()
	b := poolBackend(t, nil)
	s := sized("m1", 1, 512)
	s.Host = "retired"
	if _, err := b.Create(context.Background(), s); !errors.Is(err, backend.ErrPlacementGone) {
		t.Fatalf("Create on a retired host, no domain anywhere: %v, want ErrPlacementGone", err)
	}
	// A domain of the machine found on b by a listing: the Create adopts it there.
	s2 := sized("m2", 1, 512)
	pl, err := b.Create(context.Background(), s2)
	if err != nil {
		t.Fatal(err)
	}
	s2.Host = "retired"
	if again, err := b.Create(context.Background(), s2); err != nil || again.Host != pl.Host {
		t.Fatalf("Create of a listed machine with a retired host: %+v %v, want adopted on %s", again, err, pl.Host)
	}
}

// twoCopies builds machine m1 on a and a copy of it on b.
func twoCopies(t *testing.T) (*Backend, backend.Placement, backend.Placement) {
	t.Helper()
	b := poolBackend(t, nil)
	s := sized("m1", 1, 512)
	s.Host = "a"
	keep, err := b.Create(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	b.loc.plan.Forget("z1", "m1") // as after a restart: the planner no longer knows
	s.Host = "b"
	spare, err := b.Create(context.Background(), s)
	if err != nil || spare.Host != "b" {
		t.Fatalf("copy on b: %+v %v", spare, err)
	}
	return b, keep, spare
}

// RemoveCopy deletes the spare copy, and only it.
func TestRemoveCopy(t *testing.T) {
	t.Parallel()
	b, keep, spare := twoCopies(t)
	if err := b.RemoveCopy(context.Background(), "m1", spare, keep); err != nil {
		t.Fatal(err)
	}
	if hasDomain(t, b, "b", spare.Domain) || !hasDomain(t, b, "a", keep.Domain) {
		t.Fatal("wrong copy removed")
	}
}

// A spare bound to a cluster, or a kept copy that is not running, is no
// proof: nothing is removed.
func TestRemoveCopyNeedsEvidence(t *testing.T) {
	t.Parallel()
	b, keep, spare := twoCopies(t)
	md := meta.Metadata{Provider: b.cfg.Provider, MachineID: "m1", ClusterID: "c1"}
	if err := b.guests.WriteMetadata(b.loc.hosts["b"].guest(spare.Domain, md.MachineID), md); err != nil {
		t.Fatal(err)
	}
	if err := b.RemoveCopy(context.Background(), "m1", spare, keep); !errors.Is(err, errNotSpare) {
		t.Fatalf("bound spare: %v, want errNotSpare", err)
	}
	md.ClusterID = ""
	if err := b.guests.WriteMetadata(b.loc.hosts["b"].guest(spare.Domain, md.MachineID), md); err != nil {
		t.Fatal(err)
	}
	if err := b.loc.hosts["a"].WithDomain(keep.Domain, func(_ virt.Conn, d virt.Domain) error { return domstate.Destroy(d) }); err != nil {
		t.Fatal(err)
	}
	if err := b.RemoveCopy(context.Background(), "m1", spare, keep); !errors.Is(err, errNotSpare) {
		t.Fatalf("kept copy shut off: %v, want errNotSpare", err)
	}
	if !hasDomain(t, b, "b", spare.Domain) || !hasDomain(t, b, "a", keep.Domain) {
		t.Fatal("a copy was removed without evidence")
	}
}

// A Create on its recorded host finds it down before asking it anything:
// ErrNothingDone (transient), so the engine may place it elsewhere if no
// earlier attempt reached the host; Unplace then frees the booking.
func TestCreateNothingDoneOnDownHost(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, func(c *Config) {
		c.Hosts = []Host{
			{Zone: "z1", URI: sizedNode(t, 4, 2<<20), Name: "a", Named: true, Enforce: true},
			{Zone: "z1", URI: "qemu+unix:///system?socket=/nonexistent/bf.sock", Name: "b", Named: true, Enforce: true},
		}
	})
	awaitStarted(t, b)
	s := sized("m1", 1, 512)
	s.Host = "b"
	_, err := b.Create(context.Background(), s)
	if !errors.Is(err, backend.ErrNothingDone) || !backend.IsTransient(err) {
		t.Fatalf("Create on a down recorded host: %v, want a transient ErrNothingDone", err)
	}
	if n, _ := b.loc.plan.HostOf("z1", "m1"); n != "b" {
		t.Fatalf("booked on %q after the refusal, want b until the engine unplaces it", n)
	}
	b.Unplace("z1", "m1")
	s.Host = ""
	if pl, err := b.Create(context.Background(), s); err != nil || pl.Host != "a" {
		t.Fatalf("placed again: %+v %v, want host a", pl, err)
	}
}
