package libvirt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
)

func TestCreateDomainXML(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	pl := mustCreate(t, b, "m1")
	if pl.Zone != "z1" || pl.Domain != meta.DomainName(b.cfg.Provider, "m1") {
		t.Fatalf("placement %+v", pl)
	}
	c := testConn(t, b, "z1")
	x := domainXML(t, c, pl.Domain)

	if x.Type != "test" { // the test driver offers only "test"; real hosts: kvm, else qemu
		t.Errorf("type %q", x.Type)
	}
	if x.Memory.Value != 256*1024 || x.VCPU.Value != 2 {
		t.Errorf("memory %d %s, vcpu %d", x.Memory.Value, x.Memory.Unit, x.VCPU.Value)
	}
	if x.Features == nil || x.Features.ACPI == nil {
		t.Error("no <acpi/>")
	}
	if x.OS.Kernel != "/boot/vmlinuz-test" || x.OS.Initrd != "/boot/initrd-test" || x.OS.Cmdline != "console=ttyS0 panic=-1" {
		t.Errorf("direct kernel boot: %+v", x.OS)
	}
	d := x.Devices
	if len(d.Disks) != 1 || d.Disks[0].Target.Bus != "virtio" || d.Disks[0].Driver.Type != "qcow2" ||
		d.Disks[0].Source.File.File != "/var/lib/bigfleet-pool/"+pl.Domain+".qcow2" {
		t.Errorf("disk %+v", d.Disks)
	}
	if len(d.Interfaces) != 1 || d.Interfaces[0].Source.Network.Network != "default" || d.Interfaces[0].Model.Type != "virtio" {
		t.Errorf("nic %+v", d.Interfaces)
	}
	if len(d.Channels) != 1 || d.Channels[0].Source.UNIX == nil || d.Channels[0].Target.VirtIO.Name != "org.qemu.guest_agent.0" {
		t.Errorf("agent channel %+v", d.Channels)
	}
	if len(d.Serials) != 1 || d.Serials[0].Source.Pty == nil || len(d.Consoles) != 1 || d.Consoles[0].Source.Pty == nil {
		t.Errorf("serial/console %+v %+v", d.Serials, d.Consoles)
	}
	md := readMD(t, c, pl.Domain)
	if !md.Owned(b.cfg.Provider, "m1") || md.OperationID != "op-m1" || md.ClusterID != "" {
		t.Errorf("metadata %+v", md)
	}
}

func TestCreateWithoutKernelBootsDisk(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, func(c *Config) { c.Kernel, c.Initrd, c.Cmdline, c.Network = "", "", "", "" })
	pl := mustCreate(t, b, "m1")
	x := domainXML(t, testConn(t, b, "z1"), pl.Domain)
	if x.OS.Kernel != "" || len(x.OS.BootDevices) == 0 || x.OS.BootDevices[0].Dev != "hd" {
		t.Errorf("os %+v", x.OS)
	}
	if len(x.Devices.Interfaces) != 0 {
		t.Errorf("NIC without --network: %+v", x.Devices.Interfaces)
	}
}

func readMD(t *testing.T, c *libvirt.Connect, name string) meta.Metadata {
	t.Helper()
	dom, err := c.LookupDomainByName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Free()
	md, found, err := meta.Read(dom)
	if err != nil || !found {
		t.Fatalf("metadata of %s: found=%v err=%v", name, found, err)
	}
	return md
}

func volXML(t *testing.T, c *libvirt.Connect, name string) *libvirtxml.StorageVolume {
	t.Helper()
	p, err := c.LookupStoragePoolByName("bigfleet")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	v, err := p.LookupStorageVolByName(name)
	if err != nil {
		t.Fatalf("volume %s: %v", name, err)
	}
	defer v.Free()
	x, err := volume.XML(v)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestCreateOverlayBackedByGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ image, format, path string }{
		{"golden.qcow2", "qcow2", "/var/lib/bigfleet-pool/golden.qcow2"},
		{"golden-raw.img", "raw", "/var/lib/bigfleet-pool/golden-raw.img"}, // format read, not assumed
	} {
		t.Run(tc.image, func(t *testing.T) {
			t.Parallel()
			b, _ := newTestBackend(t, func(c *Config) { c.Image = tc.image })
			pl := mustCreate(t, b, "m1")
			v := volXML(t, testConn(t, b, "z1"), meta.OverlayName(pl.Domain))
			if v.BackingStore == nil || v.BackingStore.Path != tc.path || v.BackingStore.Format.Type != tc.format {
				t.Fatalf("backing store %+v", v.BackingStore)
			}
			if v.Target.Format.Type != "qcow2" {
				t.Errorf("overlay format %+v", v.Target.Format)
			}
		})
	}
}

func TestCreateAdoptsOwnDomain(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	ctx := context.Background()
	pl := mustCreate(t, b, "m1")
	c := testConn(t, b, "z1")
	if again := mustCreate(t, b, "m1"); again != pl {
		t.Fatalf("retry placed %+v, first %+v", again, pl)
	}
	// Stopped behind our back: a retried Create starts it again.
	if err := onDomain(lvc(c), pl.Domain, domstate.Destroy); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, spec("m1")); err != nil {
		t.Fatal(err)
	}
	dom, _ := c.LookupDomainByName(pl.Domain)
	defer dom.Free()
	if st, _, _ := dom.GetState(); st != libvirt.DOMAIN_RUNNING {
		t.Fatalf("adopted domain not started: state %d", st)
	}
}

// defineStranger defines a domain under the name our machine id derives to,
// with the given metadata element (or none).
func defineStranger(t *testing.T, c *libvirt.Connect, name string, md *meta.Metadata) string {
	t.Helper()
	x := &libvirtxml.Domain{Type: "test", Name: name,
		Memory: &libvirtxml.DomainMemory{Value: 64, Unit: "MiB"},
		OS:     &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm"}}}
	if md != nil {
		s, _ := md.Marshal(true)
		x.Metadata = &libvirtxml.DomainMetadata{XML: s}
	}
	s, err := x.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	dom, err := c.DomainDefineXML(s)
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Free()
	out, _ := dom.GetXMLDesc(0)
	return out
}

func TestStrangerDomainIsNeverTouched(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	ctx := context.Background()
	c := testConn(t, b, "z1")
	others := map[string]*meta.Metadata{
		"no-metadata":    nil,
		"other-provider": {Provider: "someone-else", MachineID: "no-meta"},
		"other-machine":  {Provider: b.cfg.Provider, MachineID: "another"},
	}
	for id, md := range others {
		name := meta.DomainName(b.cfg.Provider, id)
		before := defineStranger(t, c, name, md)
		_, err := b.Create(ctx, spec(id))
		if !errors.Is(err, backend.ErrNotOurs) {
			t.Fatalf("%s: Create err = %v, want ErrNotOurs", id, err)
		}
		err = b.Delete(ctx, backend.DeleteSpec{MachineID: id, Zone: "z1"})
		if !errors.Is(err, backend.ErrNotOurs) {
			t.Fatalf("%s: Delete err = %v, want ErrNotOurs", id, err)
		}
		dom, err := c.LookupDomainByName(name)
		if err != nil {
			t.Fatalf("%s: stranger's domain gone: %v", id, err)
		}
		after, _ := dom.GetXMLDesc(0)
		active, _ := dom.IsActive()
		dom.Free()
		if after != before || active {
			t.Fatalf("%s: stranger's domain changed (active=%v)", id, active)
		}
		if volumeExists(t, c, "bigfleet", meta.OverlayName(name)) {
			t.Fatalf("%s: an overlay was made for a stranger's name", id)
		}
	}
}

func TestCreateRollbackRemovesOnlyItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("fresh attempt", func(t *testing.T) {
		t.Parallel()
		b, _ := newTestBackend(t, nil)
		b.loc.hosts["z1"].ForceDomainType("no-such-virt-type") // define fails
		_, err := b.Create(ctx, spec("m1"))
		if err == nil || !strings.HasPrefix(err.Error(), "create: define domain: ") {
			t.Fatalf("err = %v, want create: define domain: ...", err)
		}
		c := testConn(t, b, "z1")
		name := meta.DomainName(b.cfg.Provider, "m1")
		if volumeExists(t, c, "bigfleet", meta.OverlayName(name)) || domainExists(t, c, name) {
			t.Fatal("rollback left the overlay or the domain")
		}
		if !volumeExists(t, c, "bigfleet", "golden.qcow2") {
			t.Fatal("golden image gone")
		}
	})
	t.Run("overlay of an earlier attempt is kept", func(t *testing.T) {
		t.Parallel()
		b, _ := newTestBackend(t, nil)
		c := testConn(t, b, "z1")
		name := meta.DomainName(b.cfg.Provider, "m1")
		pool, _ := c.LookupStoragePoolByName("bigfleet")
		defer pool.Free()
		g, err := volume.ReadGolden(lvp(pool), "golden.qcow2")
		if err != nil {
			t.Fatal(err)
		}
		if _, created, err := volume.EnsureOverlay(lvp(pool), meta.OverlayName(name), g); err != nil || !created {
			t.Fatal(created, err)
		}
		b.loc.hosts["z1"].ForceDomainType("no-such-virt-type")
		if _, err := b.Create(ctx, spec("m1")); err == nil {
			t.Fatal("Create succeeded")
		}
		if !volumeExists(t, c, "bigfleet", meta.OverlayName(name)) {
			t.Fatal("rollback deleted an overlay this attempt did not make")
		}
		b.loc.hosts["z1"].ForceDomainType("test")
		mustCreate(t, b, "m1") // and a later attempt reuses it
	})
	t.Run("foreign volume under our overlay name", func(t *testing.T) {
		t.Parallel()
		b, _ := newTestBackend(t, nil)
		c := testConn(t, b, "z1")
		name := meta.DomainName(b.cfg.Provider, "m1")
		pool, _ := c.LookupStoragePoolByName("bigfleet")
		defer pool.Free()
		vol, err := volume.CreateRaw(lvp(pool), meta.OverlayName(name), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		vol.Free()
		_, err = b.Create(ctx, spec("m1"))
		if !errors.Is(err, volume.ErrForeignVolume) || !strings.HasPrefix(err.Error(), "create: overlay volume: ") {
			t.Fatalf("err = %v", err)
		}
		if !volumeExists(t, c, "bigfleet", meta.OverlayName(name)) {
			t.Fatal("foreign volume deleted")
		}
	})
}

func TestCreateErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := newTestBackend(t, nil)
	if _, err := b.Create(ctx, backend.MachineSpec{MachineID: "m", Zone: "nowhere"}); !errors.Is(err, backend.ErrUnknownZone) {
		t.Errorf("unknown zone: %v", err)
	}
	b2, _ := newTestBackend(t, func(c *Config) { c.Image = "missing.qcow2" })
	if _, err := b2.Create(ctx, spec("m1")); err == nil || !strings.HasPrefix(err.Error(), "create: golden image: ") {
		t.Errorf("missing golden: %v", err)
	}
	b3, _ := newTestBackend(t, func(c *Config) { c.Pool = "nopool" })
	if _, err := b3.Create(ctx, spec("m1")); err == nil || !strings.HasPrefix(err.Error(), "create: storage pool: nopool: ") {
		t.Errorf("missing pool: %v", err)
	}
}

// CheckShapes on a connected host (the test driver, which has the
// network "default" and a 64 MiB golden image) names an unknown network;
// a disk_gib type gets an overlay of that size.
func TestCheckShapesAndDiskSize(t *testing.T) {
	t.Parallel()
	shapes := map[string]backend.Shape{
		"big":   {DiskGiB: 2, NICs: []backend.NIC{{Network: "default"}}},
		"nonet": {NICs: []backend.NIC{{Network: "nowhere"}}},
	}
	b, _ := newTestBackend(t, func(c *Config) { c.Shapes = shapes })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := b.CheckShapes(ctx)
	if err == nil || !strings.Contains(err.Error(), `--instance-types: instance type "nonet": network[0]: no active libvirt network "nowhere" (active: default) (host z1)`) ||
		strings.Contains(err.Error(), `"big"`) {
		t.Fatalf("CheckShapes: %v", err)
	}
	delete(b.cfg.Shapes, "nonet")
	if err := b.CheckShapes(ctx); err != nil {
		t.Fatalf("good shapes refused: %v", err)
	}
	spec := backend.MachineSpec{MachineID: "m1", OperationID: "op1", Zone: "z1", InstanceType: "big", VCPU: 1, MemoryMiB: 256}
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	conn := testConn(t, b, "z1")
	pool, err := conn.LookupStoragePoolByName("bigfleet")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	vol, err := pool.LookupStorageVolByName(meta.OverlayName(meta.DomainName(b.cfg.Provider, "m1")))
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Free()
	info, err := vol.GetInfo()
	if err != nil || info.Capacity != 2<<30 {
		t.Fatalf("overlay capacity %v (%v), want 2 GiB", info, err)
	}
	// A type whose network is gone fails its Create with the same words.
	b.cfg.Shapes["nonet"] = backend.Shape{NICs: []backend.NIC{{Network: "nowhere"}}}
	spec = backend.MachineSpec{MachineID: "m2", OperationID: "op2", Zone: "z1", InstanceType: "nonet", VCPU: 1, MemoryMiB: 256}
	_, err = b.Create(ctx, spec)
	if err == nil || !strings.Contains(err.Error(), `create: instance type shape: --instance-types: instance type "nonet": network[0]`) {
		t.Fatalf("create on a missing network: %v", err)
	}
	if errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatal("a shape the host lacks is not a host outage")
	}
}
