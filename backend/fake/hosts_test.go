package fake

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

func twoHosts(policy placement.Policy) *Backend {
	return New(Options{Policy: policy, Hosts: []Host{
		{Name: "a1", Zone: "zone-a", VCPUs: 8, MemoryMiB: 8192, PoolGiB: 10, Labels: map[string]string{"rack": "r1"}},
		{Name: "a2", Zone: "zone-a", VCPUs: 8, MemoryMiB: 8192, PoolGiB: 10},
		{Name: "b1", Zone: "zone-b", VCPUs: 4, MemoryMiB: 4096, PoolGiB: 10, Cordoned: true},
	}})
}

func hspec(id, zone string, v, m int) backend.MachineSpec {
	return backend.MachineSpec{MachineID: id, OperationID: "op-" + id, Zone: zone, VCPU: v, MemoryMiB: m}
}

func TestHostsSpreadAndFull(t *testing.T) {
	ctx := context.Background()
	b := twoHosts(placement.Spread)
	if z := b.Zones(); strings.Join(z, ",") != "zone-a,zone-b" {
		t.Fatalf("zones = %v", z)
	}
	on := map[string]int{}
	for _, id := range []string{"m1", "m2", "m3", "m4"} {
		p, err := b.Create(ctx, hspec(id, "zone-a", 2, 4096))
		if err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		if p.Host == "" || p.Why == "" || p.Ref() != "zone-a/"+p.Host+"/bf-"+id {
			t.Fatalf("placement %+v", p)
		}
		on[p.Host]++
	}
	if on["a1"] != 2 || on["a2"] != 2 {
		t.Fatalf("spread put %v, want 2 and 2", on)
	}
	_, err := b.Create(ctx, hspec("m5", "zone-a", 1, 1024))
	if !errors.Is(err, backend.ErrNoCapacity) || !strings.Contains(err.Error(), "zone zone-a: no host fits 1 vCPU, 1024 MiB") {
		t.Fatalf("full zone: err = %v", err)
	}
	if _, ok := b.VM("m5"); ok {
		t.Fatal("a refused Create left a VM")
	}
	// The cordoned host gets nothing; uncordoned it does.
	if _, err := b.Create(ctx, hspec("m6", "zone-b", 1, 512)); !errors.Is(err, backend.ErrNoCapacity) {
		t.Fatalf("cordoned zone: err = %v", err)
	}
	if err := b.SetCordoned("b1", false); err != nil {
		t.Fatal(err)
	}
	if p, err := b.Create(ctx, hspec("m6", "zone-b", 1, 512)); err != nil || p.Host != "b1" {
		t.Fatalf("uncordoned: %+v %v", p, err)
	}
	if err := b.SetCordoned("nope", true); !errors.Is(err, backend.ErrUnknownHost) {
		t.Fatalf("unknown host: %v", err)
	}
	// A Delete frees the room at once.
	if err := b.Delete(ctx, backend.DeleteSpec{MachineID: "m1", Zone: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, hspec("m5", "zone-a", 1, 1024)); err != nil {
		t.Fatalf("after delete: %v", err)
	}
	hs := b.Hosts(ctx)
	if len(hs) != 3 || hs[0].Name != "a1" || hs[0].Labels["rack"] != "r1" || hs[0].Capacity.VCPUs != 8 {
		t.Fatalf("hosts = %+v", hs)
	}
	used := hs[0].Capacity.UsedMemoryMiB + hs[1].Capacity.UsedMemoryMiB
	if used != 3*4096+1024 || hs[0].Capacity.Machines+hs[1].Capacity.Machines != 4 {
		t.Fatalf("used = %d MiB, machines %d+%d", used, hs[0].Capacity.Machines, hs[1].Capacity.Machines)
	}
}

func TestHostsPack(t *testing.T) {
	b := twoHosts(placement.Pack)
	for _, id := range []string{"m1", "m2"} {
		if p, err := b.Create(context.Background(), hspec(id, "zone-a", 1, 1024)); err != nil || p.Host != "a1" {
			t.Fatalf("pack %s: %+v %v", id, p, err)
		}
	}
}

// A down host does not block its zone; its machines are neither listed
// nor confirmed gone, and their operations fail as unavailable.
func TestHostDown(t *testing.T) {
	ctx := context.Background()
	b := twoHosts(placement.Spread)
	p1, _ := b.Create(ctx, hspec("m1", "zone-a", 1, 1024))
	b.SetHostDown(p1.Host, true)
	if err := b.ZoneReady("zone-a"); err != nil {
		t.Fatalf("zone with one host up: %v", err)
	}
	p2, err := b.Create(ctx, hspec("m2", "zone-a", 1, 1024))
	if err != nil || p2.Host == p1.Host {
		t.Fatalf("create with a host down: %+v %v", p2, err)
	}
	for _, zi := range b.Inventory(ctx) {
		if zi.Zone != "zone-a" {
			continue
		}
		if zi.Err != nil || len(zi.Machines) != 1 || zi.Machines[0].MachineID != "m2" {
			t.Fatalf("inventory %+v", zi)
		}
	}
	if gone, err := b.ConfirmGone(ctx, "m1", p1); gone || !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("confirm on a down host: %v %v", gone, err)
	}
	err = b.Configure(ctx, backend.ConfigureSpec{MachineID: "m1", Placement: p1})
	if !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("configure on a down host: %v", err)
	}
	b.SetHostDown(p2.Host, true)
	if err := b.ZoneReady("zone-a"); !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("zone with every host down: %v", err)
	}
	if gone, err := b.ConfirmGone(ctx, "never", backend.Placement{Zone: "zone-b"}); !gone || err != nil {
		t.Fatalf("confirm of a machine never created: %v %v", gone, err)
	}
}

// The hosts' reservations are released when the Create's work fails.
func TestHostsCreateFailureReleases(t *testing.T) {
	ctx := context.Background()
	b := twoHosts(placement.Spread)
	b.SetFailure(OpCreate, "m1", errors.New("boom"))
	if _, err := b.Create(ctx, hspec("m1", "zone-a", 8, 8192)); err == nil {
		t.Fatal("injected failure not returned")
	}
	for _, h := range b.Hosts(ctx) {
		if h.Capacity.UsedVCPUs != 0 || h.Capacity.Machines != 0 {
			t.Fatalf("reservation kept after a failed Create: %+v", h)
		}
	}
}

func TestPlacementReady(t *testing.T) {
	b := twoHosts(placement.Spread)
	b.SetHostDown("a1", true)
	if err := b.PlacementReady(backend.Placement{Zone: "zone-a", Host: "a1"}); !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("down host: %v", err)
	}
	if err := b.PlacementReady(backend.Placement{Zone: "zone-a", Host: "a2"}); err != nil {
		t.Fatalf("up host: %v", err)
	}
}

// TestSetDown: a host declared down gets no placements and says so in
// Hosts, with the reason; the end of the declaration undoes both; an
// unknown host is ErrUnknownHost.
func TestSetDown(t *testing.T) {
	ctx := context.Background()
	b := twoHosts(placement.Spread)
	if err := b.SetDown("a1", true, "powered off"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"m1", "m2"} {
		if p, err := b.Create(ctx, hspec(id, "zone-a", 1, 512)); err != nil || p.Host != "a2" {
			t.Fatalf("create %s with a1 declared down: %+v %v", id, p, err)
		}
	}
	if hs := b.Hosts(ctx); !hs[0].Down || hs[0].DownReason != "powered off" || hs[1].Down {
		t.Fatalf("hosts = %+v", hs)
	}
	if err := b.SetDown("a1", false, ""); err != nil {
		t.Fatal(err)
	}
	if p, err := b.Create(ctx, hspec("m3", "zone-a", 1, 512)); err != nil || p.Host != "a1" {
		t.Fatalf("create after the declaration ended: %+v %v", p, err)
	}
	if hs := b.Hosts(ctx); hs[0].Down || hs[0].DownReason != "" {
		t.Fatalf("a1 after up = %+v", hs[0])
	}
	if err := b.SetDown("nope", true, "x"); !errors.Is(err, backend.ErrUnknownHost) {
		t.Fatalf("unknown host: %v", err)
	}
}
