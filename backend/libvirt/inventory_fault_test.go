package libvirt

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

func machineIDs(zi backend.ZoneInventory) []string {
	var ids []string
	for _, o := range zi.Machines {
		ids = append(ids, o.MachineID)
	}
	sort.Strings(ids)
	return ids
}

// TestInventoryFaultMakesListingIncomplete: a fault anywhere in a listing
// (the list itself, or reading any domain that may be ours) fails the
// zone's listing, never shortens it; once the fault passes the listing is
// complete again.
func TestInventoryFaultMakesListingIncomplete(t *testing.T) {
	t.Parallel()
	steps := []stepFault{
		{"list domains: ", "conn.ListAllDomains", "", 1},
		{"listing incomplete: name of a listed domain: ", "dom.GetName", "", 1},
		{"listing incomplete: metadata of ", "dom.GetMetadata", "$dom", 1},
		{"listing incomplete: state of ", "dom.GetState", "$dom", 1},
	}
	for _, s := range steps {
		for _, kind := range []faultKind{faultRPC, faultTimeout, faultDrop} {
			t.Run(s.op+"/"+kindName(kind), func(t *testing.T) {
				t.Parallel()
				b, f, _ := newFaultBackend(t, nil, nil)
				mustCreate(t, b, "m1")
				mustCreate(t, b, "m2")
				strangers(t, b)
				r := f.add(s.rule(kind, meta.DomainName(b.cfg.Provider, "m1")))
				inv := b.Inventory(context.Background())
				if f.hits(r) != 1 || inv[0].Err == nil || !strings.HasPrefix(inv[0].Err.Error(), s.step) ||
					!strings.Contains(inv[0].Err.Error(), "injected") || inv[0].Machines != nil {
					t.Fatalf("hits %d, listing %+v, want an error %q... and no machines", f.hits(r), inv[0], s.step)
				}
				f.clear()
				waitFor(t, 5*time.Second, func() bool { return b.ZoneReady("z1") == nil })
				inv = b.Inventory(context.Background())
				if inv[0].Err != nil || strings.Join(machineIDs(inv[0]), ",") != "m1,m2" {
					t.Fatalf("after the fault: %+v", inv[0])
				}
			})
		}
	}
}

// TestInventoryBlockedCallTimesOut: a call that hangs (a frozen daemon)
// fails the zone's listing at the inventory timeout.
func TestInventoryBlockedCallTimesOut(t *testing.T) {
	t.Parallel()
	b, f, _ := newFaultBackend(t, func(c *Config) { c.InventoryTimeout = 200 * time.Millisecond }, nil)
	mustCreate(t, b, "m1")
	r := f.add(&fault{op: "dom.GetMetadata", nth: 1, kind: faultBlock})
	defer close(r.release)
	start := time.Now()
	inv := b.Inventory(context.Background())
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("took %s", took)
	}
	if !errors.Is(inv[0].Err, backend.ErrHostUnavailable) || !strings.Contains(inv[0].Err.Error(), "no answer within") {
		t.Fatalf("listing %+v", inv[0])
	}
	gone, err := b.ConfirmGone(context.Background(), "m1", backend.Placement{Zone: "z1", Domain: meta.DomainName(b.cfg.Provider, "m1")})
	if err != nil || gone {
		t.Fatalf("ConfirmGone of a present domain: %v %v", gone, err)
	}
	f.add(&fault{op: "conn.LookupDomainByName", nth: 1, kind: faultBlock, release: r.release})
	gone, err = b.ConfirmGone(context.Background(), "m1", backend.Placement{Zone: "z1"})
	if gone || err == nil || !strings.Contains(err.Error(), "no answer within") {
		t.Fatalf("ConfirmGone with a hung lookup: %v %v", gone, err)
	}
	start = time.Now()
	gone, err = b.ConfirmGone(context.Background(), "m2", backend.Placement{Zone: "z1"})
	if gone || !errors.Is(err, backend.ErrHostUnavailable) || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("ConfirmGone behind a hung lookup: %v %v after %s", gone, err, time.Since(start))
	}
}

// TestDamagedMetadataIsReportedNotDropped: a damaged record is left out of
// the listing with a WARN naming the domain, the listing still succeeds
// for the other machines, and ConfirmGone says the domain is there.
func TestDamagedMetadataIsReportedNotDropped(t *testing.T) {
	t.Parallel()
	b, f, logs := newFaultBackend(t, nil, nil)
	pl := mustCreate(t, b, "m1")
	mustCreate(t, b, "m2")
	f.add(&fault{op: "dom.GetMetadata", name: pl.Domain, kind: faultGarbage})
	inv := b.Inventory(context.Background())
	if inv[0].Err != nil || strings.Join(machineIDs(inv[0]), ",") != "m2" {
		t.Fatalf("listing %+v", inv[0])
	}
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"domain with unreadable bigfleet metadata skipped","zone":"z1","domain":"`+pl.Domain) {
		t.Fatalf("no WARN naming the domain:\n%s", logs)
	}
	if gone, err := b.ConfirmGone(context.Background(), "m1", pl); gone || err != nil {
		t.Fatalf("ConfirmGone = %v, %v; want false: the domain is there", gone, err)
	}
}

// TestConfirmGone: gone only when the lookup says no such domain.
func TestConfirmGone(t *testing.T) {
	t.Parallel()
	b, f, _ := newFaultBackend(t, func(c *Config) {
		c.Hosts = append(c.Hosts, Host{Zone: "down", URI: "qemu+unix:///system?socket=/nonexistent/bf.sock"})
	}, nil)
	pl := mustCreate(t, b, "m1")
	ctx := context.Background()
	if gone, err := b.ConfirmGone(ctx, "never-created", backend.Placement{Zone: "z1"}); !gone || err != nil {
		t.Fatalf("a machine without a domain: %v %v", gone, err)
	}
	f.add(&fault{op: "conn.LookupDomainByName", name: pl.Domain, nth: 1, kind: faultRPC})
	if gone, err := b.ConfirmGone(ctx, "m1", pl); gone || err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("lookup failed: %v %v", gone, err)
	}
	if gone, err := b.ConfirmGone(ctx, "m9", backend.Placement{Zone: "down", Domain: "bf-x"}); gone || !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("host down: %v %v", gone, err)
	}
	if err := onDomain(lvc(testConn(t, b, "z1")), pl.Domain, func(d virt.Domain) error { _ = domstate.Destroy(d); return domstate.Undefine(d) }); err != nil {
		t.Fatal(err)
	}
	if gone, err := b.ConfirmGone(ctx, "m1", pl); !gone || err != nil {
		t.Fatalf("really gone: %v %v", gone, err)
	}
}

// TestDropMidListingRedials: the link drops in the middle of a listing,
// the first redials fail; the host reports down with the dial's error,
// then comes back to the same host state.
func TestDropMidListingRedials(t *testing.T) {
	t.Parallel()
	b, f, logs := newFaultBackend(t, func(c *Config) {
		c.ReconnectMin, c.ReconnectMax = 50*time.Millisecond, 100*time.Millisecond
	}, nil)
	mustCreate(t, b, "m1")
	mustCreate(t, b, "m2")
	refused := libvirt.Error{Code: libvirt.ERR_SYSTEM_ERROR, Message: "Failed to connect socket: Connection refused"}
	f.failDials(refused, refused)
	f.add(&fault{op: "dom.GetMetadata", nth: 2, kind: faultDrop})
	if inv := b.Inventory(context.Background()); inv[0].Err == nil {
		t.Fatalf("listing across a drop succeeded: %+v", inv[0])
	}
	waitFor(t, 5*time.Second, func() bool {
		err := b.ZoneReady("z1")
		return err != nil && strings.Contains(err.Error(), "Connection refused")
	})
	waitFor(t, 5*time.Second, func() bool { return b.ZoneReady("z1") == nil })
	f.mu.Lock()
	dials := f.dials
	f.mu.Unlock()
	if dials != 4 {
		t.Fatalf("dials %d, want 1 + 2 refused + 1", dials)
	}
	inv := b.Inventory(context.Background())
	if inv[0].Err != nil || strings.Join(machineIDs(inv[0]), ",") != "m1,m2" {
		t.Fatalf("after the redial: %+v", inv[0])
	}
	if !strings.Contains(logs.String(), "libvirt host connection lost; reconnecting") {
		t.Fatalf("loss not logged:\n%s", logs)
	}
}

// The host view reads the versions once per connection: the QEMU driver
// answers virConnectGetVersion from capabilities a daemon may re-probe on
// each call, and the view is read after every reconcile pass.
func TestHostsReadVersionsOncePerLink(t *testing.T) {
	t.Parallel()
	b, f, _ := newFaultBackend(t, nil, nil)
	count := f.add(&fault{op: "conn.GetVersion", nth: -1}) // never fires: counts the calls it sees
	first := b.Hosts(context.Background())
	for range 3 {
		if again := b.Hosts(context.Background()); again[0].HypervisorVersion != first[0].HypervisorVersion ||
			again[0].LibvirtVersion != first[0].LibvirtVersion {
			t.Fatalf("versions changed: %+v then %+v", first[0], again[0])
		}
	}
	if first[0].LibvirtVersion == "" {
		t.Fatal("no libvirt version read")
	}
	f.mu.Lock()
	n := count.seen
	f.mu.Unlock()
	if n != 1 {
		t.Fatalf("GetVersion asked %d times over 4 host views on one connection, want 1", n)
	}
}
