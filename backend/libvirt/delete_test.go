package libvirt

import (
	"context"
	"errors"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
)

func TestDeleteIsIdempotent(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	ctx := context.Background()
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	ds := backend.DeleteSpec{MachineID: "m1", OperationID: "op-del", Zone: "z1", Placement: pl}
	for i := range 3 {
		if err := b.Delete(ctx, ds); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
		if domainExists(t, c, pl.Domain) || volumeExists(t, c, "bigfleet", meta.OverlayName(pl.Domain)) {
			t.Fatalf("Delete #%d left the domain or its overlay", i+1)
		}
	}
	if !volumeExists(t, c, "bigfleet", "golden.qcow2") {
		t.Fatal("golden image deleted")
	}
	// Without a placement (the VM never got one) the name is derived.
	mustCreate(t, b, "m2")
	if err := b.Delete(ctx, backend.DeleteSpec{MachineID: "m2", Zone: "z1"}); err != nil {
		t.Fatal(err)
	}
	if domainExists(t, c, meta.DomainName(b.cfg.Provider, "m2")) {
		t.Fatal("derived-name delete left the domain")
	}
}

func TestDeleteHalfGone(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	ctx := context.Background()
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	// Domain undefined behind our back, the overlay left: Delete cleans it.
	if err := onDomain(lvc(c), pl.Domain, func(d virt.Domain) error { _ = domstate.Destroy(d); return domstate.Undefine(d) }); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, backend.DeleteSpec{MachineID: "m1", Zone: "z1", Placement: pl}); err != nil {
		t.Fatal(err)
	}
	if volumeExists(t, c, "bigfleet", meta.OverlayName(pl.Domain)) {
		t.Fatal("overlay left")
	}
}

func TestGoldenImageIsNeverDeleted(t *testing.T) {
	t.Parallel()
	// A provider whose machine's overlay name is the golden image's name.
	provider := "prov-golden"
	image := meta.OverlayName(meta.DomainName(provider, "m1"))
	b, _ := newTestBackend(t, func(c *Config) { c.Provider = provider; c.Image = image })
	c := testConn(t, b, "z1")
	pool, _ := c.LookupStoragePoolByName("bigfleet")
	defer pool.Free()
	vol, err := volume.CreateRaw(lvp(pool), image, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	vol.Free()
	ctx := context.Background()
	if _, err := b.Create(ctx, spec("m1")); !errors.Is(err, volume.ErrGolden) {
		t.Fatalf("Create over the golden name: %v", err)
	}
	err = b.Delete(ctx, backend.DeleteSpec{MachineID: "m1", Zone: "z1"})
	if !errors.Is(err, volume.ErrGolden) {
		t.Fatalf("Delete err = %v, want volume.ErrGolden", err)
	}
	if !volumeExists(t, c, "bigfleet", image) {
		t.Fatal("golden image deleted")
	}
	if err := volume.Delete(lvp(pool), "golden.qcow2", "golden.qcow2"); !errors.Is(err, volume.ErrGolden) {
		t.Fatalf("deleteVolume(golden) = %v", err)
	}
}
