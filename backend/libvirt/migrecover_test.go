package libvirt

import (
	"context"
	"errors"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/recovery"
)

// On the test driver (no migration, so no copy is ever paused by one),
// a copy on the other host beside the running one is not a migration's
// leftover: nothing is removed.
func TestRecoverMigrationChangesNothingWithoutProof(t *testing.T) {
	t.Parallel()
	b, _, pl := emulatedMigration(t)
	to := map[string]string{"a": "b", "b": "a"}[pl.Host]
	sc, dc := hostConn(t, b, pl.Host), hostConn(t, b, to)
	x, err := domainXML(t, sc, pl.Domain).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	d, err := dc.DomainDefineXML(x)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	if err := d.Create(); err != nil {
		t.Fatal(err)
	}
	if err := d.Suspend(); err != nil { // paused, but by a user
		t.Fatal(err)
	}
	other := pl
	other.Host = to
	_, err = b.RecoverMigration(context.Background(), "m1", pl, []backend.Placement{pl, other})
	if !errors.Is(err, recovery.ErrUndecided) {
		t.Fatalf("err = %v", err)
	}
	if !domainExists(t, sc, pl.Domain) || !domainExists(t, dc, pl.Domain) {
		t.Fatal("a copy was removed without proof")
	}
}
