package libvirt

import (
	"context"
	"errors"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// observed returns the inventory entry of one machine (fails if absent).
func observed(t *testing.T, b *Backend, id string) backend.Observed {
	t.Helper()
	for _, zi := range b.Inventory(context.Background()) {
		if zi.Err != nil {
			t.Fatalf("inventory of %s: %v", zi.Zone, zi.Err)
		}
		for _, o := range zi.Machines {
			if o.MachineID == id {
				return o
			}
		}
	}
	t.Fatalf("machine %s not listed", id)
	return backend.Observed{}
}

// TestInventoryReportsRunState: a domain destroyed behind our back is
// listed with libvirt's state and reason, a running one as running.
func TestInventoryReportsRunState(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	mustCreate(t, b, "m2")
	if err := onDomain(lvc(c), pl.Domain, domstate.Destroy); err != nil {
		t.Fatal(err)
	}
	if o := observed(t, b, "m1"); o.Running || o.Run != (backend.RunState{State: backend.RunShutoff, Reason: "destroyed"}) ||
		o.Run.String() != "shut off (destroyed)" || o.Run.Up() || !o.Run.Inactive() {
		t.Fatalf("destroyed domain observed as %+v (%s)", o, o.Run)
	}
	if o := observed(t, b, "m2"); !o.Running || o.Run.State != backend.RunRunning || !o.Run.Up() {
		t.Fatalf("running domain observed as %+v", o)
	}
}

// TestStartIsIdempotent: Start brings a stopped domain of ours back, is a
// no-op on a running one, and never starts a stranger's or a missing one.
func TestStartIsIdempotent(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	ctx := context.Background()
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	if err := onDomain(lvc(c), pl.Domain, domstate.Destroy); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.Start(ctx, "m1", pl); err != nil {
			t.Fatal(err)
		}
		if o := observed(t, b, "m1"); o.Run.State != backend.RunRunning {
			t.Fatalf("after Start: %+v", o.Run)
		}
	}
	name := meta.DomainName(b.cfg.Provider, "other")
	defineStranger(t, c, name, &meta.Metadata{Provider: "other-provider", MachineID: "other"})
	if err := b.Start(ctx, "other", backend.Placement{Zone: "z1", Domain: name}); !errors.Is(err, backend.ErrNotOurs) {
		t.Fatalf("stranger: %v", err)
	}
	if act := isActive(t, c, name); act {
		t.Fatal("a stranger's domain was started")
	}
	if err := b.Start(ctx, "gone", backend.Placement{Zone: "z1"}); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("missing domain: %v", err)
	}
}

func isActive(t *testing.T, c *libvirt.Connect, name string) bool {
	t.Helper()
	d, err := c.LookupDomainByName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	a, err := d.IsActive()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestOwnedRunning: the check Configure and Drain would make before they
// talk to the agent reads the metadata of a running domain, and says at
// once, with the state, that a stopped guest cannot answer.
func TestOwnedRunning(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	h, _ := b.loc.host("z1")
	if md, err := b.guests.OwnedRunning(h.guest(pl.Domain, "m1")); err != nil || md.MachineID != "m1" {
		t.Fatalf("running domain: %+v %v", md, err)
	}
	if _, err := b.guests.OwnedRunning(h.guest(pl.Domain, "m2")); !errors.Is(err, backend.ErrNotOurs) {
		t.Fatalf("another machine's domain: %v", err)
	}
	if err := onDomain(lvc(c), pl.Domain, domstate.Destroy); err != nil {
		t.Fatal(err)
	}
	_, err := b.guests.OwnedRunning(h.guest(pl.Domain, "m1"))
	if !errors.Is(err, backend.ErrNotRunning) || err.Error() != "domain "+pl.Domain+" is shut off (destroyed): domain is not running" {
		t.Fatalf("stopped domain: %v", err)
	}
	if _, err := b.guests.OwnedRunning(h.guest("bf-nope", "m1")); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("missing domain: %v", err)
	}
}
