package libvirt

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// TestDeleteFaultAtEveryStep: whatever step of Delete fails and however,
// the step and the cause are returned, a retry once the fault has passed
// removes the domain and both volumes, and nothing else is touched.
func TestDeleteFaultAtEveryStep(t *testing.T) {
	t.Parallel()
	needISOTool(t)
	ud := userData(t)
	steps := []stepFault{
		{"delete: look up domain: ", "conn.LookupDomainByName", "$dom", 1},
		{"delete: read metadata of ", "dom.GetMetadata", "$dom", 1},
		{"delete: record intent: ", "dom.SetMetadata", "$dom", 1},
		{"delete: destroy domain: ", "dom.Destroy", "$dom", 1},
		{"delete: undefine domain: ", "dom.UndefineFlags", "$dom", 1},
		{"delete: undefine domain: ", "dom.Undefine", "$dom", 1},
		{"delete: overlay volume: storage pool bigfleet: ", "conn.LookupStoragePoolByName", "bigfleet", 1},
		{"delete: overlay volume: ", "pool.LookupStorageVolByName", "$overlay", 1},
		{"delete: overlay volume: ", "vol.Delete", "$overlay", 1},
		{"delete: seed volume: storage pool bigfleet: ", "conn.LookupStoragePoolByName", "bigfleet", 2},
		{"delete: seed volume: ", "pool.LookupStorageVolByName", "$seed", 1},
		{"delete: seed volume: ", "vol.Delete", "$seed", 1},
	}
	for _, s := range steps {
		for _, kind := range kindsFor(s.op) {
			t.Run(s.op+"/"+s.name+"/"+kindName(kind), func(t *testing.T) {
				t.Parallel()
				b, f, _ := newFaultBackend(t, func(c *Config) { c.BaseUserData = ud }, func(f *faults) { f.emulateU = true })
				same := strangers(t, b)
				c := testConn(t, b, "z1")
				pl := mustCreate(t, b, "m1")
				ds := backend.DeleteSpec{MachineID: "m1", OperationID: "op-del", Zone: "z1", Placement: pl}
				r := f.add(s.rule(kind, pl.Domain))
				err := b.Delete(context.Background(), ds)
				if f.hits(r) != 1 {
					t.Fatalf("the fault did not fire (err %v)", err)
				}
				if err == nil || !strings.HasPrefix(err.Error(), s.step) || !strings.Contains(err.Error(), "injected") {
					t.Fatalf("err = %v, want %q... with the injected cause", err, s.step)
				}
				f.clear()
				waitFor(t, 5*time.Second, func() bool { return b.ZoneReady("z1") == nil })
				if err := b.Delete(context.Background(), ds); err != nil {
					t.Fatalf("retry after the fault: %v", err)
				}
				if domainExists(t, c, pl.Domain) || volumeExists(t, c, "bigfleet", meta.OverlayName(pl.Domain)) ||
					volumeExists(t, c, "bigfleet", meta.SeedName(pl.Domain)) {
					t.Fatal("the retried delete left a piece")
				}
				same()
				onlyOurs(t, f, pl.Domain)
			})
		}
	}
}
