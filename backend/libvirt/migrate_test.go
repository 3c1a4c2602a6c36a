package libvirt

import (
	"context"
	"errors"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/migrate"
)

// The test driver has no migration, so a Migrate there is the failure
// path: the destination was booked and its overlay made, and both must be
// gone afterwards, with the domain still running on its host.
func TestMigrateFailureCleansDestination(t *testing.T) {
	t.Parallel()
	b, pl := poolWithMachine(t)
	ctx := context.Background()
	to := map[string]string{"a": "b", "b": "a"}[pl.Host]
	_, err := b.Migrate(ctx, backend.MigrateSpec{MachineID: "m1", Placement: pl, VCPU: 1, MemoryMiB: 512})
	if err == nil || !strings.Contains(err.Error(), "migrate "+pl.Domain+" from host "+pl.Host+" to host "+to) {
		t.Fatalf("err = %v", err)
	}
	sc, dc := hostConn(t, b, pl.Host), hostConn(t, b, to)
	if !domainExists(t, sc, pl.Domain) || domainExists(t, dc, pl.Domain) {
		t.Fatal("the domain moved although the migration failed")
	}
	if !volumeExists(t, sc, "bigfleet", meta.OverlayName(pl.Domain)) || volumeExists(t, dc, "bigfleet", meta.OverlayName(pl.Domain)) {
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
	b, pl := poolWithMachine(t)
	ctx := context.Background()
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

// emulatedMigration is a backend of two hosts in zone z1 whose migration
// call is emulated (the test driver cannot migrate), with machine m1
// created on one of them.
func emulatedMigration(t *testing.T) (*Backend, *faults, backend.Placement) {
	b, f, _ := newFaultBackend(t, func(c *Config) {
		c.Hosts = []Host{
			{Zone: "z1", URI: sizedNode(t, 4, 2<<20), Name: "a", Named: true, Enforce: true},
			{Zone: "z1", URI: sizedNode(t, 4, 4<<20), Name: "b", Named: true, Enforce: true},
		}
	}, func(f *faults) { f.emulateM = true; f.volXML = stampGolden })
	pl, err := b.Create(context.Background(), sized("m1", 1, 512))
	if err != nil {
		t.Fatal(err)
	}
	return b, f, pl
}

// With the migration itself emulated (the test driver cannot migrate),
// everything around it is real: the destination's overlay is made on its
// golden image (NON_SHARED_INC), the DEST_XML defines a domain whose disk
// is that overlay and whose metadata names the destination, the source's
// volume goes, and the books move.
func TestMigrateSuccessAroundTheCall(t *testing.T) {
	t.Parallel()
	b, f, pl := emulatedMigration(t)
	ctx := context.Background()
	to := map[string]string{"a": "b", "b": "a"}[pl.Host]
	np, err := b.Migrate(ctx, backend.MigrateSpec{MachineID: "m1", Placement: pl, VCPU: 1, MemoryMiB: 512, ToHost: to})
	if err != nil {
		t.Fatal(err)
	}
	if np.Host != to || np.Domain != pl.Domain || np.Ref() != "z1/"+to+"/"+pl.Domain || !strings.HasPrefix(np.Why, "named: host "+to) {
		t.Fatalf("placement %+v", np)
	}
	if len(f.migrated) != 1 || f.migrated[0] != migrate.Flags(false)|libvirt.MIGRATE_NON_SHARED_INC {
		t.Fatalf("flags %v", f.migrated)
	}
	sc, dc := hostConn(t, b, pl.Host), hostConn(t, b, to)
	if domainExists(t, sc, pl.Domain) || !domainExists(t, dc, pl.Domain) {
		t.Fatal("domain not moved")
	}
	if volumeExists(t, sc, "bigfleet", meta.OverlayName(pl.Domain)) || !volumeExists(t, dc, "bigfleet", meta.OverlayName(pl.Domain)) {
		t.Fatal("overlay: want it on the destination only")
	}
	d := domainXML(t, dc, pl.Domain)
	if src := d.Devices.Disks[0].Source.File.File; !strings.HasSuffix(src, "/"+meta.OverlayName(pl.Domain)) {
		t.Errorf("disk %s", src)
	}
	if md, err := meta.Decode(metadataOf(t, dc, pl.Domain)); err != nil || md.Host != to || md.MachineID != "m1" || md.VCPUs != 1 {
		t.Errorf("metadata on the destination %+v, %v", md, err)
	}
	used := map[string]int{}
	for _, h := range b.Hosts(ctx) {
		used[h.Name] = h.Capacity.Machines
	}
	if used[pl.Host] != 0 || used[to] != 1 {
		t.Errorf("books %v", used)
	}
	// The machine works where it went: Delete finds it there.
	if err := b.Delete(ctx, backend.DeleteSpec{MachineID: "m1", Zone: "z1", Placement: np}); err != nil || domainExists(t, dc, pl.Domain) {
		t.Fatalf("delete after migrate: %v", err)
	}
}

// A migration whose reply is lost after the guest moved is the success it
// is: the destination's volumes stay under the domain running there.
func TestMigrateLostReplyAfterTheMove(t *testing.T) {
	t.Parallel()
	b, f, pl := emulatedMigration(t)
	ctx := context.Background()
	f.add(&fault{op: "conn.Migrate3", kind: faultAfter})
	np, err := b.Migrate(ctx, backend.MigrateSpec{MachineID: "m1", Placement: pl, VCPU: 1, MemoryMiB: 512})
	if err != nil || np.Host == pl.Host {
		t.Fatalf("migrate with a lost reply: %+v, %v", np, err)
	}
	if dc := hostConn(t, b, np.Host); !domainExists(t, dc, pl.Domain) || !volumeExists(t, dc, "bigfleet", meta.OverlayName(pl.Domain)) {
		t.Fatal("the destination lost its domain or volume")
	}
	if volumeExists(t, hostConn(t, b, pl.Host), "bigfleet", meta.OverlayName(pl.Domain)) {
		t.Error("the source kept the overlay of a domain that left it")
	}
}
