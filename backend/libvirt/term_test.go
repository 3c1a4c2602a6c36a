package libvirt

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// writeRawMD writes md on the named domain as another replica would: no
// term of this process stamped on it.
func writeRawMD(t *testing.T, c *libvirt.Connect, name string, md meta.Metadata) {
	t.Helper()
	d, err := c.LookupDomainByName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	s, err := md.Marshal(false)
	if err != nil {
		t.Fatal(err)
	}
	flags := libvirt.DOMAIN_AFFECT_CONFIG
	if on, _ := d.IsActive(); on {
		flags |= libvirt.DOMAIN_AFFECT_LIVE
	}
	if err := d.SetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, s, meta.Prefix, meta.NS, flags); err != nil {
		t.Fatal(err)
	}
}

// TestLeaderTermOnEveryWrite (issue 41, the split brain's second line):
// under a leader's term every definition and metadata write carries it;
// a domain a newer leader of the same Lease wrote is never changed (a
// Delete, a Configure's rollback and a Start are refused with
// ErrNewerTerm, the domain left as it is), the replica is told once, and
// its listing tells it too; a term of another Lease (a Lease made again)
// is written over.
func TestLeaderTermOnEveryWrite(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	c := testConn(t, b, "z1")
	var told atomic.Int32
	own := backend.LeaderTerm{Lease: "lease-uid-1", N: 3}
	b.SetLeaderTerm(own, func(found backend.LeaderTerm) {
		if found.N != 4 {
			t.Errorf("told of term %+v", found)
		}
		told.Add(1)
	})
	t.Cleanup(func() { meta.ClearTerm(b.cfg.Provider) })

	pl := mustCreate(t, b, "m1")
	md := readMD(t, c, pl.Domain)
	if md.Term != own {
		t.Fatalf("defined with term %+v, want %+v", md.Term, own)
	}
	newer := md
	newer.Term.N = 4
	writeRawMD(t, c, pl.Domain, newer)

	ctx := context.Background()
	err := b.Delete(ctx, backend.DeleteSpec{MachineID: "m1", OperationID: "op-del", Zone: "z1", Placement: pl})
	if !errors.Is(err, backend.ErrNewerTerm) {
		t.Fatalf("Delete of a domain a newer leader wrote: %v, want ErrNewerTerm", err)
	}
	if err := b.RollBackConfigure(ctx, backend.ConfigureSpec{MachineID: "m1", OperationID: "op", Placement: pl}); !errors.Is(err, backend.ErrNewerTerm) {
		t.Fatalf("a metadata write: %v, want ErrNewerTerm", err)
	}
	if err := b.Start(ctx, "m1", pl); !errors.Is(err, backend.ErrNewerTerm) {
		t.Fatalf("Start: %v, want ErrNewerTerm", err)
	}
	if got := readMD(t, c, pl.Domain); got.Term.N != 4 || got.Delete.Begun() {
		t.Fatalf("the domain was changed: %+v", got)
	}
	listedMachine(t, b, "m1")
	if n := told.Load(); n != 1 {
		t.Fatalf("told %d times, want once", n)
	}

	// Another Lease's term (the Lease was deleted and made again): not
	// comparable, written over with this replica's.
	other := md
	other.Term = backend.LeaderTerm{Lease: "lease-uid-0", N: 9}
	other.Marks = map[string]backend.FenceMark{"s": {Epoch: 1, Sequence: 1}}
	writeRawMD(t, c, pl.Domain, other)
	if err := b.ClearMark(ctx, "m1", pl, "s"); err != nil {
		t.Fatalf("a term of another Lease refused: %v", err)
	}
	if got := readMD(t, c, pl.Domain); got.Term != own || len(got.Marks) != 0 {
		t.Fatalf("after a write over another Lease's term: %+v, want term %+v", got, own)
	}
	if err := b.Delete(ctx, backend.DeleteSpec{MachineID: "m1", OperationID: "op-del", Zone: "z1", Placement: pl}); err != nil {
		t.Fatal(err)
	}
}
