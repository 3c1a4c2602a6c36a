package storetest

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
	"github.com/bigfleet/libvirt-provider/server/store"
)

func commit(f *Faulty, id string) error {
	return f.Commit(context.Background(), record.Batch{Machines: []record.Machine{{ID: id, State: record.Speculative}}})
}

// A failed Commit writes nothing; the faults carry the errno they imitate;
// FailCall fails exactly one call of a sequence.
func TestFaults(t *testing.T) {
	t.Parallel()
	mem := store.NewMemory()
	f := Wrap(mem)
	f.DiskFull()
	if err := commit(f, "a"); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("disk full: %v", err)
	}
	f.FsyncError()
	if err := commit(f, "a"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync: %v", err)
	}
	f.Heal()
	f.FailCall(2, errors.New("boom"))
	var got []bool
	for _, id := range []string{"b", "c", "d"} {
		got = append(got, commit(f, id) == nil)
	}
	if got[0] != true || got[1] != false || got[2] != true {
		t.Fatalf("FailCall(2) outcomes %v", got)
	}
	snap, err := mem.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, m := range snap.Machines {
		ids[m.ID] = true
	}
	if ids["a"] || ids["c"] || !ids["b"] || !ids["d"] {
		t.Fatalf("stored %v: a failed commit must write nothing", ids)
	}
	if f.Commits() != 5 || f.Failed() != 3 {
		t.Fatalf("commits %d failed %d", f.Commits(), f.Failed())
	}
}
