package libvirt

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
)

// machineZone is a zone of three test-driver hosts whose capabilities
// list the machine types of a QEMU version each (qemuOf: host URI →
// "7.2" or "10.0"), with m1 running on a, the largest, and its domain
// reading as pc-i440fx-10.0 (defined on a QEMU 10 host). Without the
// check the zone's policy (spread: most free memory) would send it to b.
func machineZone(t *testing.T, qemuB, qemuC string) (*Backend, *faults, backend.Placement, *atomic.Int32) {
	t.Helper()
	uris := map[string]string{"a": sizedNode(t, 4, 8<<20), "b": sizedNode(t, 4, 4<<20), "c": sizedNode(t, 4, 2<<20)}
	qemuOf := map[string]string{uris["a"]: "10.0", uris["b"]: qemuB, uris["c"]: qemuC}
	capsReads := &atomic.Int32{}
	b, f, _ := newFaultBackend(t, func(c *Config) {
		c.Hosts = []Host{
			{Zone: "z1", URI: uris["a"], Name: "a", Named: true, Enforce: true},
			{Zone: "z1", URI: uris["b"], Name: "b", Named: true, Enforce: true},
			{Zone: "z1", URI: uris["c"], Name: "c", Named: true, Enforce: true},
		}
	}, func(f *faults) {
		f.emulateM, f.volXML = true, stampGolden
		f.capsOf = func(uri, s string) string {
			capsReads.Add(1)
			return withMachines(t, s, qemuOf[uri])
		}
		f.domXML = func(_, x string) string { return withMachine(t, x, "pc-i440fx-10.0") }
	})
	pl, err := b.Create(context.Background(), sized("m1", 1, 512))
	if err != nil || pl.Host != "a" {
		t.Fatalf("create: %+v, %v (want host a)", pl, err)
	}
	return b, f, pl, capsReads
}

// withMachines makes every hvm guest of the capabilities offer the
// i440fx machine types of a QEMU version (pc its alias).
func withMachines(t *testing.T, s, version string) string {
	var caps libvirtxml.Caps
	if err := caps.Unmarshal(s); err != nil {
		t.Errorf("capabilities: %v", err)
		return s
	}
	for i := range caps.Guests {
		caps.Guests[i].Arch.Machines = []libvirtxml.CapsGuestMachine{
			{Name: "pc", Canonical: "pc-i440fx-" + version}, {Name: "pc-i440fx-" + version}, {Name: "pc-i440fx-7.1"}}
	}
	out, err := caps.Marshal()
	if err != nil {
		t.Errorf("capabilities: %v", err)
		return s
	}
	return out
}

func withMachine(t *testing.T, x, machine string) string {
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil || d.OS == nil || d.OS.Type == nil {
		t.Errorf("domain XML: %v", err)
		return x
	}
	d.OS.Type.Machine = machine
	out, err := d.Marshal()
	if err != nil {
		t.Errorf("domain XML: %v", err)
		return x
	}
	return out
}

// Issue 38 item 7: placement used to send a domain defined on QEMU 10
// (pc-i440fx-10.0) to a QEMU 7.2 host, where the migration could only
// fail. A host whose QEMU lacks the guest's machine type is passed over
// although the policy prefers it, and the migration goes where it can run.
func TestMigratePassesOverHostWithoutMachineType(t *testing.T) {
	t.Parallel()
	b, f, pl, _ := machineZone(t, "7.2", "10.0")
	np, err := b.Migrate(context.Background(), backend.MigrateSpec{MachineID: "m1", Placement: pl, VCPU: 1, MemoryMiB: 512})
	if err != nil || np.Host != "c" {
		t.Fatalf("migrate: %+v, %v; want host c (b's QEMU 7.2 has no pc-i440fx-10.0)", np, err)
	}
	if len(f.migrated) != 1 {
		t.Fatalf("migration calls %d, want 1", len(f.migrated))
	}
}

// A named host, or every host, that cannot run the guest is refused
// before any libvirt work, the error naming each host and why; nothing
// is booked or made anywhere.
func TestMigrateRefusesHostsWithoutMachineType(t *testing.T) {
	t.Parallel()
	b, f, pl, capsReads := machineZone(t, "7.2", "7.2")
	ctx := context.Background()
	spec := backend.MigrateSpec{MachineID: "m1", Placement: pl, VCPU: 1, MemoryMiB: 512, ToHost: "b"}
	_, err := b.Migrate(ctx, spec)
	if !errors.Is(err, backend.ErrNoCapacity) || !strings.Contains(err.Error(),
		"host b cannot run machine m1: its QEMU does not support machine type pc-i440fx-10.0 (it offers pc-i440fx-7.1, pc-i440fx-7.2)") {
		t.Fatalf("named b: %v", err)
	}
	spec.ToHost = ""
	_, err = b.Migrate(ctx, spec)
	for _, h := range []string{"b", "c"} {
		if !errors.Is(err, backend.ErrNoCapacity) || !strings.Contains(err.Error(), "host "+h+": its QEMU does not support machine type pc-i440fx-10.0") {
			t.Fatalf("every host refused: %v, want host %s named", err, h)
		}
	}
	if len(f.migrated) != 0 {
		t.Fatal("a refused migration reached libvirt")
	}
	for _, h := range b.Hosts(ctx) {
		if h.Name != "a" && h.Capacity.Machines != 0 {
			t.Errorf("host %s booked after a refusal: %+v", h.Name, h.Capacity)
		}
	}
	// The capabilities were read once per host and connection (three at
	// connect for the domain type, then b and c once for the migrations).
	if n := capsReads.Load(); n != 5 {
		t.Errorf("capabilities read %d times, want 5", n)
	}
}
