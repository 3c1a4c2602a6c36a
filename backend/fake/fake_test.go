package fake

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

func spec(id, zone string) backend.MachineSpec {
	return backend.MachineSpec{MachineID: id, OperationID: "op-" + id, Zone: zone, InstanceType: "kvm.small", VCPU: 2, MemoryMiB: 4096}
}

func mustCreate(t *testing.T, b *Backend, id, zone string) backend.Placement {
	t.Helper()
	p, err := b.Create(t.Context(), spec(id, zone))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	b := New(Options{})
	ctx := t.Context()
	p := mustCreate(t, b, "m1", "zone-b")
	if p != (backend.Placement{Zone: "zone-b", Domain: "bf-m1"}) || p.Ref() != "zone-b/bf-m1" {
		t.Fatalf("placement %+v", p)
	}
	if again := mustCreate(t, b, "m1", "zone-b"); again != p || b.Len() != 1 {
		t.Fatal("retried create built a second VM")
	}
	blob := []byte("secret bootstrap")
	md := map[string]string{"k": "v\x00"}
	if err := b.Configure(ctx, backend.ConfigureSpec{MachineID: "m1", Placement: p, ClusterID: "c1",
		BootstrapBlob: blob, ShardMetadata: md}); err != nil {
		t.Fatal(err)
	}
	md["k"] = "changed"
	bd, ok := b.Binding("m1")
	if !ok || bd.ClusterID != "c1" || bd.BlobLen != len(blob) || bd.ShardMetadata["k"] != "v\x00" {
		t.Fatalf("binding %+v", bd)
	}
	if b.BlobDigest("m1") != Digest(blob) {
		t.Fatal("digest mismatch")
	}
	inv := b.Inventory(ctx)
	if len(inv) != 2 || len(inv[0].Machines) != 0 || len(inv[1].Machines) != 1 || inv[1].Machines[0].ClusterID != "c1" {
		t.Fatalf("inventory %+v", inv)
	}
	if err := b.Drain(ctx, backend.DrainSpec{MachineID: "m1", Placement: p, ClusterID: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Binding("m1"); ok || b.BlobDigest("m1") != "" {
		t.Fatal("drain kept the binding")
	}
	for range 2 { // the second Delete finds nothing and still succeeds
		if err := b.Delete(ctx, backend.DeleteSpec{MachineID: "m1", Zone: "zone-b", Placement: p}); err != nil {
			t.Fatal(err)
		}
	}
	if b.Len() != 0 || b.Calls(OpDelete) != 2 {
		t.Fatalf("len %d calls %d", b.Len(), b.Calls(OpDelete))
	}
}

func TestNotFoundAndUnknownZone(t *testing.T) {
	t.Parallel()
	b := New(Options{Zones: []string{"z1"}})
	ctx := t.Context()
	if _, err := b.Create(ctx, spec("m", "z9")); !errors.Is(err, backend.ErrUnknownZone) {
		t.Fatalf("create in unknown zone: %v", err)
	}
	if err := b.Configure(ctx, backend.ConfigureSpec{MachineID: "nope"}); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("configure: %v", err)
	}
	if err := b.Drain(ctx, backend.DrainSpec{MachineID: "nope"}); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("drain: %v", err)
	}
	mustCreate(t, b, "m", "z1")
	err := b.Configure(ctx, backend.ConfigureSpec{MachineID: "m", Placement: backend.Placement{Zone: "z1", Domain: "bf-other"}})
	if !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("configure with foreign domain: %v", err)
	}
	if _, err := b.Create(ctx, backend.MachineSpec{Zone: "z1"}); err == nil {
		t.Fatal("empty machine id accepted")
	}
}

func TestInjectedFailures(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	b := New(Options{Fail: func(op, id string) error {
		if op == OpConfigure && id == "bad" {
			return boom
		}
		return nil
	}})
	ctx := t.Context()
	mustCreate(t, b, "bad", "zone-a")
	if err := b.Configure(ctx, backend.ConfigureSpec{MachineID: "bad", ClusterID: "c"}); !errors.Is(err, boom) {
		t.Fatalf("fail func: %v", err)
	}
	if _, ok := b.Binding("bad"); ok {
		t.Fatal("failed configure recorded a binding")
	}
	b.SetFailure(OpCreate, "", boom)
	if _, err := b.Create(ctx, spec("x", "zone-a")); !errors.Is(err, boom) || b.Len() != 1 {
		t.Fatalf("wildcard failure: %v", err)
	}
	b.SetFailure(OpCreate, "", nil)
	b.SetFailure(OpCreate, "y", boom)
	if _, err := b.Create(ctx, spec("x", "zone-a")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, spec("y", "zone-a")); !errors.Is(err, boom) {
		t.Fatalf("per-machine failure: %v", err)
	}
	b.ClearFailures()
	mustCreate(t, b, "y", "zone-a")
	if b.Calls(OpCreate) != 5 {
		t.Fatalf("calls %d", b.Calls(OpCreate))
	}
}

func TestZoneDownAndHosts(t *testing.T) {
	t.Parallel()
	b := New(Options{})
	mustCreate(t, b, "m", "zone-a")
	b.SetZoneDown("zone-a", true)
	if err := b.ZoneReady("zone-a"); !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("ready: %v", err)
	}
	if err := b.ZoneReady("zone-b"); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(t.Context(), backend.DeleteSpec{MachineID: "m"}); !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("delete on down host: %v", err)
	}
	inv := b.Inventory(t.Context())
	if !errors.Is(inv[0].Err, backend.ErrHostUnavailable) || inv[0].Machines != nil || inv[1].Err != nil {
		t.Fatalf("inventory %+v", inv)
	}
	hs := b.Hosts(t.Context())
	if len(hs) != 2 || hs[0].URI != "fake://zone-a" || hs[0].Connected || hs[0].DomainCount != 1 ||
		!hs[1].Connected || hs[1].URI != "fake://zone-b" {
		t.Fatalf("hosts %+v", hs)
	}
	b.SetZoneDown("zone-a", false)
	if len(b.Inventory(t.Context())[0].Machines) != 1 {
		t.Fatal("zone did not come back")
	}
	_ = b.Close()
	if _, err := b.Create(t.Context(), spec("n", "zone-b")); !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("after close: %v", err)
	}
}

func TestVanish(t *testing.T) {
	t.Parallel()
	b := New(Options{})
	mustCreate(t, b, "m", "zone-a")
	if !b.Vanish("m") || b.Vanish("m") {
		t.Fatal("vanish should report existence once")
	}
	if _, ok := b.VM("m"); ok || len(b.Inventory(t.Context())[0].Machines) != 0 {
		t.Fatal("vanished VM still listed")
	}
}

func TestDelayHonoursContext(t *testing.T) {
	t.Parallel()
	b := New(Options{Delay: time.Hour})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.Create(ctx, spec("m", "zone-a")); !errors.Is(err, context.DeadlineExceeded) || b.Len() != 0 {
		t.Fatalf("create under deadline: %v", err)
	}
	b.SetDelay(OpCreate, time.Millisecond)
	mustCreate(t, b, "m", "zone-a")
	inv := b.Inventory(ctx) // ctx expired: every zone reports it
	if !errors.Is(inv[0].Err, context.DeadlineExceeded) || !errors.Is(inv[1].Err, context.DeadlineExceeded) {
		t.Fatalf("inventory %+v", inv)
	}
}

func TestHangUntilCancelled(t *testing.T) {
	t.Parallel()
	b := New(Options{})
	b.SetHang(OpDrain, true)
	mustCreate(t, b, "m", "zone-a")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Drain(ctx, backend.DrainSpec{MachineID: "m"}) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("hung drain: %v", err)
	}
	b.SetHang(OpDrain, false)
	if err := b.Drain(t.Context(), backend.DrainSpec{MachineID: "m"}); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	b := New(Options{})
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			id := string(rune('a'+i%26)) + string(rune('a'+i/26))
			p, err := b.Create(t.Context(), spec(id, DefaultZones[i%2]))
			if err == nil {
				err = b.Configure(t.Context(), backend.ConfigureSpec{MachineID: id, Placement: p, ClusterID: "c"})
			}
			if err != nil {
				t.Error(err)
			}
			b.Inventory(t.Context())
			b.Hosts(t.Context())
		})
	}
	wg.Wait()
	if b.Len() != 50 {
		t.Fatalf("len %d", b.Len())
	}
}

func TestVMCopyDoesNotAlias(t *testing.T) {
	t.Parallel()
	b := New(Options{Zones: []string{"z"}})
	p := mustCreate(t, b, "m", "z")
	_ = b.Configure(t.Context(), backend.ConfigureSpec{MachineID: "m", Placement: p, ShardMetadata: map[string]string{"a": "1"}})
	vm, _ := b.VM("m")
	vm.Binding.ShardMetadata["a"] = "2"
	if bd, _ := b.Binding("m"); bd.ShardMetadata["a"] != "1" {
		t.Fatal("VM copy aliases internal state")
	}
}

// TestRunStateAndStart: a VM stopped behind the engine's back is listed
// with its state and reason, a Drain (or a Configure of a paused VM) fails
// at once with ErrNotRunning, Start (idempotent) brings it back, and so
// does a Configure (TestConfigureStartsAStoppedVM).
func TestRunStateAndStart(t *testing.T) {
	t.Parallel()
	b := New(Options{})
	ctx := t.Context()
	p := mustCreate(t, b, "m", "zone-a")
	if o := b.Inventory(ctx)[0].Machines[0]; !o.Running || o.Run.State != backend.RunRunning {
		t.Fatalf("created VM observed as %+v", o)
	}
	crashed := backend.RunState{State: backend.RunShutoff, Reason: "crashed"}
	if !b.SetRunState("m", crashed) || b.SetRunState("nope", crashed) {
		t.Fatal("SetRunState should report existence")
	}
	if o := b.Inventory(ctx)[0].Machines[0]; o.Running || o.Run != crashed {
		t.Fatalf("crashed VM observed as %+v", o)
	}
	err := b.Drain(ctx, backend.DrainSpec{MachineID: "m", Placement: p, ClusterID: "c"})
	if !errors.Is(err, backend.ErrNotRunning) || err.Error() != "fake: domain bf-m is shut off (crashed): domain is not running" {
		t.Fatalf("drain of a stopped VM: %v", err)
	}
	b.SetRunState("m", backend.RunState{State: backend.RunPaused, Reason: "user"})
	if err := b.Configure(ctx, backend.ConfigureSpec{MachineID: "m", Placement: p}); !errors.Is(err, backend.ErrNotRunning) {
		t.Fatalf("configure of a paused VM: %v", err)
	}
	b.SetRunState("m", crashed)
	for range 2 {
		if err := b.Start(ctx, "m", p); err != nil {
			t.Fatal(err)
		}
	}
	if o := b.Inventory(ctx)[0].Machines[0]; !o.Running || !o.Run.Up() || b.Calls(OpStart) != 2 {
		t.Fatalf("started VM observed as %+v", o)
	}
	if err := b.Start(ctx, "nope", backend.Placement{}); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("start of a missing VM: %v", err)
	}
}

// TestConfigureStartsAStoppedVM: a Configure of a VM that is shut off or
// crashed starts it, as the next reconcile would, and binds it.
func TestConfigureStartsAStoppedVM(t *testing.T) {
	t.Parallel()
	b := New(Options{})
	ctx := t.Context()
	p := mustCreate(t, b, "m", "zone-a")
	b.SetRunState("m", backend.RunState{State: backend.RunShutoff, Reason: "destroyed"})
	if err := b.Configure(ctx, backend.ConfigureSpec{MachineID: "m", Placement: p, ClusterID: "c"}); err != nil {
		t.Fatalf("configure of a stopped VM: %v", err)
	}
	if o := b.Inventory(ctx)[0].Machines[0]; !o.Running || o.ClusterID != "c" {
		t.Fatalf("configured VM observed as %+v", o)
	}
}

func TestGuestAddresses(t *testing.T) {
	t.Parallel()
	b := New(Options{})
	pl, err := b.Create(t.Context(), backend.MachineSpec{MachineID: "m1", Zone: DefaultZones[0]})
	if err != nil {
		t.Fatal(err)
	}
	var ga backend.GuestAddresser = b
	a1, err := ga.GuestAddresses(t.Context(), "m1", pl)
	if err != nil || len(a1) != 1 || !strings.HasPrefix(a1[0], "eth0 198.51.100.") {
		t.Fatalf("addresses %q, %v", a1, err)
	}
	if a2, _ := ga.GuestAddresses(t.Context(), "m1", pl); a2[0] != a1[0] {
		t.Fatalf("addresses changed: %q then %q", a1, a2)
	}
	if _, err := ga.GuestAddresses(t.Context(), "nope", backend.Placement{Zone: DefaultZones[0]}); err == nil {
		t.Fatal("no VM: want an error")
	}
}
