package libvirt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// sizedNode writes a private test-driver world with the given node size
// (virNodeGetInfo reads it), so hosts of one zone are distinct daemons.
func sizedNode(t testing.TB, cpus int, memKiB int) string {
	t.Helper()
	src, err := os.ReadFile("testdata/node.xml")
	if err != nil {
		t.Fatal(err)
	}
	cpu := "<node>\n  <cpu><mhz>2000</mhz><model>test</model><active>" + itoa(cpus) + "</active><nodes>1</nodes><sockets>1</sockets><cores>" +
		itoa(cpus) + "</cores><threads>1</threads></cpu>\n  <memory>" + itoa(memKiB) + "</memory>"
	p := filepath.Join(t.TempDir(), "node.xml")
	if err := os.WriteFile(p, []byte(strings.Replace(string(src), "<node>", cpu, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return "test://" + p
}

func itoa(n int) string { return strconv.Itoa(n) }

// poolBackend: zone z1 of two hosts from a hosts file: a (4 CPUs, 2 GiB)
// and b (4 CPUs, 4 GiB), capacity enforced.
// poolWithMachine is poolBackend with machine m1 (1 vCPU, 512 MiB)
// created on one of its hosts.
func poolWithMachine(t *testing.T) (*Backend, backend.Placement) {
	t.Helper()
	b := poolBackend(t, nil)
	pl, err := b.Create(context.Background(), sized("m1", 1, 512))
	if err != nil {
		t.Fatal(err)
	}
	return b, pl
}

func poolBackend(t *testing.T, mutate func(*Config)) *Backend {
	t.Helper()
	b, _ := newTestBackend(t, func(c *Config) {
		c.Hosts = []Host{
			{Zone: "z1", URI: sizedNode(t, 4, 2<<20), Name: "a", Named: true, Enforce: true, Labels: map[string]string{"rack": "r1"}},
			{Zone: "z1", URI: sizedNode(t, 4, 4<<20), Name: "b", Named: true, Enforce: true},
		}
		if mutate != nil {
			mutate(c)
		}
	})
	return b
}

func hostConn(t testing.TB, b *Backend, name string) *libvirt.Connect {
	t.Helper()
	c, err := b.loc.hosts[name].Acquire()
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	t.Cleanup(func() { b.loc.hosts[name].Release(c) })
	return rawConn(c)
}

func sized(id string, vcpu, mib int) backend.MachineSpec {
	s := spec(id)
	s.VCPU, s.MemoryMiB = vcpu, mib
	return s
}

func TestPoolSpreadsAndRecordsHost(t *testing.T) {
	t.Parallel()
	b := poolBackend(t, nil)
	ctx := context.Background()
	on := map[string][]backend.Placement{}
	for _, id := range []string{"m1", "m2", "m3"} {
		pl, err := b.Create(ctx, sized(id, 1, 1024))
		if err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		if pl.Ref() != "z1/"+pl.Host+"/"+pl.Domain || !strings.HasPrefix(pl.Why, "spread: host "+pl.Host) {
			t.Fatalf("placement %+v", pl)
		}
		on[pl.Host] = append(on[pl.Host], pl)
	}
	// b (4 GiB) takes the first two, then both have 2 GiB free: a wins on
	// fewer machines.
	if len(on["b"]) != 2 || len(on["a"]) != 1 {
		t.Fatalf("spread: %v", on)
	}
	pa := on["a"][0]
	if !domainExists(t, hostConn(t, b, "a"), pa.Domain) || domainExists(t, hostConn(t, b, "b"), pa.Domain) {
		t.Fatal("domain not on its host only")
	}
	md, err := meta.Decode(metadataOf(t, hostConn(t, b, "a"), pa.Domain))
	if err != nil || md.Host != "a" || md.VCPUs != 1 || md.MemoryMiB != 1024 {
		t.Fatalf("metadata %+v, %v", md, err)
	}
	inv := b.Inventory(ctx)
	if len(inv) != 1 || inv[0].Err != nil || len(inv[0].Machines) != 3 {
		t.Fatalf("inventory %+v", inv)
	}
	for _, o := range inv[0].Machines {
		if o.Placement.Host == "" || o.Placement.Domain == "" {
			t.Errorf("observed without host: %+v", o)
		}
	}
	hs := b.Hosts(ctx)
	if len(hs) != 2 || hs[0].Name != "a" || hs[1].Name != "b" || hs[0].Labels["rack"] != "r1" {
		t.Fatalf("hosts %+v", hs)
	}
	ca, cb := hs[0].Capacity, hs[1].Capacity
	if ca.VCPUs != 4 || ca.MemoryMiB != 2048 || ca.UsedMemoryMiB != 1024 || ca.Machines != 1 || ca.CPUOvercommit != 1 || ca.PoolFreeBytes == 0 {
		t.Errorf("a capacity %+v", ca)
	}
	if cb.MemoryMiB != 4096 || cb.UsedMemoryMiB != 2048 || cb.UsedVCPUs != 2 || cb.Machines != 2 {
		t.Errorf("b capacity %+v", cb)
	}
}

func metadataOf(t testing.TB, c *libvirt.Connect, name string) string {
	t.Helper()
	dom, err := c.LookupDomainByName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Free()
	s, err := dom.GetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, meta.NS, libvirt.DOMAIN_AFFECT_CONFIG)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A full zone refuses at once, naming zone, request and the best host;
// nothing is defined anywhere and nothing stays booked.
func TestPoolFullZone(t *testing.T) {
	t.Parallel()
	b := poolBackend(t, nil)
	ctx := context.Background()
	if _, err := b.Create(ctx, sized("big", 2, 3072)); err != nil {
		t.Fatal(err)
	}
	_, err := b.Create(ctx, sized("m2", 2, 3072))
	want := "zone z1: no host fits 2 vCPU, 3072 MiB; best host a has 4 vCPU, 2048 MiB free after overcommit (2 hosts: 0 down, 0 cordoned)"
	if !errors.Is(err, backend.ErrNoCapacity) || err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("err = %v\nwant %s...", err, want)
	}
	// Two hosts, neither down: not an outage.
	if errors.Is(err, backend.ErrHostUnavailable) || errors.Is(err, backend.ErrTransient) {
		t.Fatalf("a full zone must be permanent: %v", err)
	}
	name := meta.DomainName(b.cfg.Provider, "m2")
	if domainExists(t, hostConn(t, b, "a"), name) || domainExists(t, hostConn(t, b, "b"), name) {
		t.Fatal("a refused Create defined a domain")
	}
	// It fits once smaller.
	if pl, err := b.Create(ctx, sized("m2", 2, 1024)); err != nil || pl.Host != "a" {
		t.Fatalf("smaller: %+v %v", pl, err)
	}
}

func TestPoolCordon(t *testing.T) {
	t.Parallel()
	b := poolBackend(t, func(c *Config) { c.Hosts[1].Cordoned = true })
	ctx := context.Background()
	for _, id := range []string{"m1", "m2"} {
		if pl, err := b.Create(ctx, sized(id, 1, 512)); err != nil || pl.Host != "a" {
			t.Fatalf("cordoned b got %s: %+v %v", id, pl, err)
		}
	}
	if err := b.SetCordoned("b", false); err != nil {
		t.Fatal(err)
	}
	if pl, err := b.Create(ctx, sized("m3", 1, 512)); err != nil || pl.Host != "b" {
		t.Fatalf("uncordoned: %+v %v", pl, err)
	}
	if err := b.SetCordoned("zz", true); !errors.Is(err, backend.ErrUnknownHost) {
		t.Fatalf("unknown host: %v", err)
	}
	if hs := b.Hosts(ctx); hs[1].Cordoned {
		t.Fatal("b still reported cordoned")
	}
}

// A host that is down does not block its zone: Creates go to the other,
// the zone is ready and listed, and its machines are neither listed as
// gone nor confirmed gone.
func TestPoolHostDown(t *testing.T) {
	t.Parallel()
	b := poolBackend(t, func(c *Config) {
		c.Hosts = append(c.Hosts, Host{Zone: "z1", URI: "qemu+unix:///system?socket=/nonexistent/bf.sock", Name: "c", Named: true, Enforce: true})
	})
	ctx := context.Background()
	if err := b.ZoneReady("z1"); err != nil {
		t.Fatalf("zone with two of three hosts up: %v", err)
	}
	pl, err := b.Create(ctx, sized("m1", 1, 512))
	if err != nil || pl.Host == "c" {
		t.Fatalf("create: %+v %v", pl, err)
	}
	inv := b.Inventory(ctx)
	if len(inv) != 1 || inv[0].Err != nil || len(inv[0].Machines) != 1 {
		t.Fatalf("inventory %+v", inv)
	}
	onC := backend.Placement{Zone: "z1", Host: "c", Domain: meta.DomainName(b.cfg.Provider, "old")}
	if gone, err := b.ConfirmGone(ctx, "old", onC); gone || !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("confirm on a down host: %v %v", gone, err)
	}
	err = b.Configure(ctx, configureSpec(onC, "old", "c1", []byte("x")))
	if !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("configure on a down host: %v", err)
	}
	// A host no configuration names is not known, never "gone".
	ghost := backend.Placement{Zone: "z1", Host: "removed", Domain: onC.Domain}
	if gone, err := b.ConfirmGone(ctx, "old", ghost); gone || !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("confirm on an unconfigured host: %v %v", gone, err)
	}
}

// A machine without a host name in a zone of several hosts (recorded
// before the zone grew) is found through the listing; before any listing
// it is "not known", never looked up on a guessed host.
func TestPoolPlacementWithoutHost(t *testing.T) {
	t.Parallel()
	b, pl := poolWithMachine(t)
	ctx := context.Background()
	old := backend.Placement{Zone: "z1", Domain: pl.Domain} // as recorded by an older version
	b.loc.plan.Forget("z1", "m1")                           // as after a restart, before any listing
	if _, _, err := b.loc.locate("m1", old, ""); !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("locate before a listing: %v", err)
	}
	if gone, err := b.ConfirmGone(ctx, "m1", old); gone || err != nil {
		t.Fatalf("confirm across the zone's hosts: gone=%v err=%v, want found", gone, err)
	}
	b.Inventory(ctx)
	h, _, err := b.loc.locate("m1", old, "")
	if err != nil || h.name != pl.Host {
		t.Fatalf("locate after a listing: %v %v", h, err)
	}
	// Delete of a machine whose host is not known asks every host.
	b.loc.plan.Forget("z1", "m1")
	if err := b.Delete(ctx, backend.DeleteSpec{MachineID: "m1", Zone: "z1"}); err != nil {
		t.Fatal(err)
	}
	if domainExists(t, hostConn(t, b, pl.Host), pl.Domain) {
		t.Fatal("domain left after Delete")
	}
	if gone, err := b.ConfirmGone(ctx, "m1", old); !gone || err != nil {
		t.Fatalf("confirm after delete: %v %v", gone, err)
	}
}

// A Create whose libvirt work fails releases its booking.
func TestPoolFailedCreateReleases(t *testing.T) {
	t.Parallel()
	b := poolBackend(t, nil)
	ctx := context.Background()
	b.loc.hosts["b"].ForceDomainType("no-such-virt-type") // define fails on b
	if _, err := b.Create(ctx, sized("m1", 1, 1024)); err == nil {
		t.Fatal("create on a broken host succeeded")
	}
	for _, h := range b.Hosts(ctx) {
		if h.Capacity.Machines != 0 || h.Capacity.UsedMemoryMiB != 0 {
			t.Fatalf("booking kept after a failed Create: %+v", h)
		}
	}
}

// A zone's only --connect host keeps today's placements: no host in the
// ref, no reason, no capacity limit, overcommit shown as 0.
func TestSingleConnectHostUnchanged(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	pl, err := b.Create(context.Background(), sized("m1", 64, 1<<20))
	if err != nil || pl.Host != "" || pl.Why != "" || pl.Ref() != "z1/"+pl.Domain {
		t.Fatalf("create: %+v %v", pl, err)
	}
	hs := b.Hosts(context.Background())
	if hs[0].Name != "z1" || hs[0].Capacity.CPUOvercommit != 0 || hs[0].Capacity.Machines != 1 || hs[0].Capacity.VCPUs == 0 {
		t.Fatalf("host %+v", hs[0])
	}
}

func TestPlacementReady(t *testing.T) {
	t.Parallel()
	b := poolBackend(t, func(c *Config) {
		c.Hosts = append(c.Hosts, Host{Zone: "z1", URI: "qemu+unix:///system?socket=/nonexistent/bf.sock", Name: "c", Named: true})
	})
	if err := b.PlacementReady(backend.Placement{Zone: "z1", Host: "a", Domain: "d"}); err != nil {
		t.Fatalf("up host: %v", err)
	}
	if err := b.PlacementReady(backend.Placement{Zone: "z1", Host: "c", Domain: "d"}); !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("down host: %v", err)
	}
	if err := b.PlacementReady(backend.Placement{Zone: "z1", Domain: "d"}); err != nil {
		t.Fatalf("host not known: %v, want nil (ZoneReady decides)", err)
	}
}
