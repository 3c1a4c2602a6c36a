package libvirt

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// readMeta reads our element of the named domain through the raw test
// connection, as a rebuilt provider would.
func readMeta(t *testing.T, b *Backend, name string) meta.Metadata {
	t.Helper()
	d, err := lvc(testConn(t, b, "z1")).LookupDomainByName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	md, found, err := meta.Read(d)
	if err != nil || !found {
		t.Fatalf("metadata of %s: found %v, %v", name, found, err)
	}
	return md
}

// listedMachine is the machine's entry in a fresh Inventory of z1.
func listedMachine(t *testing.T, b *Backend, id string) backend.Observed {
	t.Helper()
	for _, zi := range b.Inventory(t.Context()) {
		if zi.Err != nil {
			t.Fatal(zi.Err)
		}
		for _, o := range zi.Machines {
			if o.MachineID == id {
				return o
			}
		}
	}
	t.Fatalf("machine %s not listed", id)
	return backend.Observed{}
}

// cutDelete runs a Delete of m1 that the host cuts at its destroy, and
// returns the domain left behind.
func cutDelete(t *testing.T, b *Backend, f *faults) backend.Placement {
	t.Helper()
	pl := mustCreate(t, b, "m1")
	r := f.add(&fault{op: "dom.Destroy", name: pl.Domain, nth: 1, kind: faultRPC})
	err := b.Delete(t.Context(), backend.DeleteSpec{MachineID: "m1", OperationID: "op-del", Zone: "z1", Placement: pl})
	if f.hits(r) != 1 || err == nil || !strings.HasPrefix(err.Error(), "delete: destroy domain: ") {
		t.Fatalf("cut Delete: %v (hits %d)", err, f.hits(r))
	}
	f.clear()
	return pl
}

// TestDeleteRecordsIntentFirst (issue 38 case 6): a Delete writes its
// intent and operation id into the domain's metadata before it destroys
// anything, so a Delete cut there leaves a domain that says so, and the
// listing carries it (a rebuilt provider resumes the Delete). A retry
// finishes it.
func TestDeleteRecordsIntentFirst(t *testing.T) {
	t.Parallel()
	b, f, _ := newFaultBackend(t, nil, nil)
	pl := cutDelete(t, b, f)

	muts := f.mutations()
	set, destroy := slices.Index(muts, "dom.SetMetadata "+pl.Domain), slices.Index(muts, "dom.Destroy "+pl.Domain)
	if set < 0 || destroy < 0 || set > destroy {
		t.Fatalf("mutations %v: want the metadata written before the destroy", muts)
	}
	md := readMeta(t, b, pl.Domain)
	if md.Delete.OperationID != "op-del" || md.Delete.Since.IsZero() || md.MachineID != "m1" || md.OperationID != "op-m1" {
		t.Fatalf("metadata after the cut Delete: %+v", md)
	}
	if o := listedMachine(t, b, "m1"); o.DeleteOperationID != "op-del" {
		t.Fatalf("listed: %+v, want DeleteOperationID op-del", o)
	}
	if err := b.Delete(t.Context(), backend.DeleteSpec{MachineID: "m1", OperationID: "op-del", Zone: "z1", Placement: pl}); err != nil {
		t.Fatal(err)
	}
	c := testConn(t, b, "z1")
	if domainExists(t, c, pl.Domain) || volumeExists(t, c, "bigfleet", meta.OverlayName(pl.Domain)) {
		t.Fatal("the retried Delete left a piece")
	}
}

// TestCreateFinishesBegunDelete: a Create that finds its machine's domain
// carrying a Delete's intent does not adopt it (it would bring back what
// BigFleet deleted): it finishes the Delete and builds a new domain.
func TestCreateFinishesBegunDelete(t *testing.T) {
	t.Parallel()
	b, f, logs := newFaultBackend(t, nil, nil)
	pl := cutDelete(t, b, f)
	s := spec("m1")
	s.OperationID = "op-create-2"
	if _, err := b.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	md := readMeta(t, b, pl.Domain)
	if md.Delete.Begun() || md.OperationID != "op-create-2" {
		t.Fatalf("metadata after the Create: %+v, want a new domain without the intent", md)
	}
	if o := listedMachine(t, b, "m1"); o.DeleteOperationID != "" {
		t.Fatalf("listed: %+v", o)
	}
	if !strings.Contains(logs.String(), "a Delete begun on it, or a migration's stale source); deleting it before building") {
		t.Fatal("no WARN line for the finished Delete")
	}
}

// TestRemoveCopyRecordsNoIntent: removing a spare copy is not a Delete of
// the machine; its intent on the copy would make a rebuilt provider delete
// the live machine. Only the Delete path records one.
func TestRemoveCopyRecordsNoIntent(t *testing.T) {
	t.Parallel()
	b, f, _ := newFaultBackend(t, nil, nil)
	pl := mustCreate(t, b, "m1")
	r := f.add(&fault{op: "dom.Destroy", name: pl.Domain, nth: 1, kind: faultRPC})
	err := b.remover.deleteOn(t.Context(), b.loc.list[0], pl.Domain, backend.DeleteSpec{MachineID: "m1", OperationID: "reconcile-duplicate", Zone: "z1", Placement: pl})
	if f.hits(r) != 1 || err == nil {
		t.Fatalf("cut removal: %v", err)
	}
	if md := readMeta(t, b, pl.Domain); md.Delete.Begun() {
		t.Fatalf("a copy's removal recorded a Delete intent: %+v", md.Delete)
	}
}

// A transient domain (running, with no persistent config: undefined under
// it, or started from XML) has its Delete intent written to its live
// definition; the Delete completes. test-pool's TestPoolCordon ended FAILED
// with "record intent: … transient domains do not have any persistent
// config" before meta.Write fell back to the live definition.
func TestDeleteOfATransientDomain(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	dom, err := c.LookupDomainByName(pl.Domain)
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Free()
	if err := dom.Undefine(); err != nil { // still running: now transient
		t.Fatal(err)
	}
	if err := b.Delete(context.Background(), backend.DeleteSpec{MachineID: "m1", OperationID: "op-del", Zone: "z1", Placement: pl}); err != nil {
		t.Fatalf("Delete of a transient domain: %v", err)
	}
	if domainExists(t, c, pl.Domain) {
		t.Fatal("the transient domain is still there")
	}
}
