package libvirt

import (
	"context"
	"errors"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
)

// The test driver has no migration, so a Migrate there is the failure
// path: the destination was booked and its overlay made, and both must be
// gone afterwards, with the domain still running on its host.
func TestMigrateFailureCleansDestination(t *testing.T) {
	t.Parallel()
	b := poolBackend(t, nil)
	ctx := context.Background()
	pl, err := b.Create(ctx, sized("m1", 1, 512))
	if err != nil {
		t.Fatal(err)
	}
	to := map[string]string{"a": "b", "b": "a"}[pl.Host]
	_, err = b.Migrate(ctx, backend.MigrateSpec{MachineID: "m1", Placement: pl, VCPU: 1, MemoryMiB: 512})
	if err == nil || !strings.Contains(err.Error(), "migrate "+pl.Domain+" from host "+pl.Host+" to host "+to) {
		t.Fatalf("err = %v", err)
	}
	sc, dc := hostConn(t, b, pl.Host), hostConn(t, b, to)
	if !domainExists(t, sc, pl.Domain) || domainExists(t, dc, pl.Domain) {
		t.Fatal("the domain moved although the migration failed")
	}
	if !volumeExists(t, sc, "bigfleet", overlayName(pl.Domain)) || volumeExists(t, dc, "bigfleet", overlayName(pl.Domain)) {
		t.Fatal("overlay volumes: want the source's kept and the destination's deleted")
	}
	for _, h := range b.Hosts(ctx) {
		if h.Name == to && h.Capacity.Machines != 0 {
			t.Fatalf("destination still booked: %+v", h.Capacity)
		}
	}
}

func TestMigrateRefusals(t *testing.T) {
	t.Parallel()
	b := poolBackend(t, nil)
	ctx := context.Background()
	pl, err := b.Create(ctx, sized("m1", 1, 512))
	if err != nil {
		t.Fatal(err)
	}
	spec := backend.MigrateSpec{MachineID: "m1", Placement: pl, VCPU: 1, MemoryMiB: 512}
	spec.ToHost = "nope"
	if _, err := b.Migrate(ctx, spec); !errors.Is(err, backend.ErrUnknownHost) {
		t.Errorf("unknown host: %v", err)
	}
	spec.ToHost = pl.Host
	if _, err := b.Migrate(ctx, spec); !errors.Is(err, backend.ErrNoCapacity) {
		t.Errorf("own host: %v", err)
	}
	spec.ToHost = ""
	spec.MemoryMiB = 1 << 20 // fits nowhere
	if _, err := b.Migrate(ctx, spec); !errors.Is(err, backend.ErrNoCapacity) {
		t.Errorf("too big: %v", err)
	}
	single, _ := newTestBackend(t, nil)
	p1 := mustCreate(t, single, "m2")
	if _, err := single.Migrate(ctx, backend.MigrateSpec{MachineID: "m2", Placement: p1}); !errors.Is(err, backend.ErrNoCapacity) {
		t.Errorf("single host zone: %v", err)
	}
}

// The destination XML points the disks at the destination's volumes and
// carries our metadata naming the destination host; anything it cannot
// carry is refused.
func TestDestDomainXML(t *testing.T) {
	t.Parallel()
	d := buildDomain(domainParams{Name: "bf-x", Type: "qemu", VCPU: 1, MemoryMiB: 128,
		Overlay: "/src/bf-x.qcow2", OverlayFmt: "qcow2", Seed: "/src/bf-x-seed.iso", Metadata: "<old/>"})
	src, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	md, _ := Metadata{Provider: "p", MachineID: "x", Host: "b"}.Marshal(true)
	out, err := destDomainXML(src, map[string]string{"/src/bf-x.qcow2": "/dst/bf-x.qcow2", "/src/bf-x-seed.iso": "/dst/bf-x-seed.iso"}, md, "qemu")
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
	if f := got.Devices.Disks[1].Source.File.File; f != "/dst/bf-x-seed.iso" {
		t.Errorf("seed disk %s", f)
	}
	if back, err := DecodeMetadata(got.Metadata.XML); err != nil || back.Host != "b" || back.MachineID != "x" {
		t.Errorf("metadata %+v %v", back, err)
	}
	if _, err := destDomainXML(src, map[string]string{}, md, "qemu"); err == nil || !strings.Contains(err.Error(), "vda") {
		t.Errorf("unmapped writable disk: %v", err)
	}
	if _, err := destDomainXML(src, map[string]string{}, md, "kvm"); err == nil || !strings.Contains(err.Error(), "accelerator") {
		t.Errorf("other accelerator: %v", err)
	}
}
