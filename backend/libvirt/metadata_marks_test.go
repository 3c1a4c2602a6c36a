package libvirt

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// TestTransitionsRecordMarks (issue 15 case 5), on the libvirt test
// driver: Create defines the domain with the marks it was handed,
// Configure and Drain record theirs merged with those already there (a
// lower mark never replaces a higher one), a failed Configure that clears
// a stale binding keeps them, and Inventory reports them back.
func TestTransitionsRecordMarks(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	withFakeAgent(b)
	ctx := context.Background()
	c := testConn(t, b, "z1")
	type marks = map[string]backend.FenceMark
	check := func(step, domain string, want marks) {
		t.Helper()
		if got := readMD(t, c, domain).Marks; !maps.Equal(got, want) {
			t.Fatalf("%s: marks in the domain metadata %v, want %v", step, got, want)
		}
	}

	s := spec("m1")
	s.Marks = marks{"s1": {Epoch: 5, Sequence: 1}}
	pl, err := b.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	check("create", pl.Domain, marks{"s1": {Epoch: 5, Sequence: 1}})

	cs := configureSpec(pl, "m1", "c1", []byte("blob"))
	cs.Marks = marks{"s1": {Epoch: 5, Sequence: 2}, "s2": {Epoch: 1}}
	if err := b.Configure(ctx, cs); err != nil {
		t.Fatal(err)
	}
	check("configure", pl.Domain, marks{"s1": {Epoch: 5, Sequence: 2}, "s2": {Epoch: 1}})

	// A failed re-configure clears the binding and records its marks.
	failed := configureSpec(pl, "m1", "exit3", []byte("blob"))
	failed.Marks = marks{"s2": {Epoch: 2}}
	if err := b.Configure(ctx, failed); err == nil {
		t.Fatal("configure with a failing hook succeeded")
	}
	check("failed configure", pl.Domain, marks{"s1": {Epoch: 5, Sequence: 2}, "s2": {Epoch: 2}})
	if err := b.Configure(ctx, cs); err != nil {
		t.Fatal(err)
	}

	// Drain handed an older mark for s1 (a stale writer) keeps the newer.
	ds := backend.DrainSpec{MachineID: "m1", OperationID: "op-drain", Placement: pl, ClusterID: "c1", Grace: time.Second,
		Marks: marks{"s1": {Epoch: 4, Sequence: 99}, "s3": {Sequence: 7}}}
	if err := b.Drain(ctx, ds); err != nil {
		t.Fatal(err)
	}
	want := marks{"s1": {Epoch: 5, Sequence: 2}, "s2": {Epoch: 2}, "s3": {Sequence: 7}}
	check("drain", pl.Domain, want)
	for _, zi := range b.Inventory(ctx) {
		for _, o := range zi.Machines {
			if o.MachineID == "m1" && !maps.Equal(o.Marks, want) {
				t.Fatalf("inventory reports marks %v, want %v", o.Marks, want)
			}
		}
	}
}

// Issue 22 finding 3: the marks reach the domain before the transition's
// work, so a first Configure that fails (on a machine without a binding,
// nothing to clear) or a Drain whose hook fails still leaves the newer
// token on the host for a provider rebuilt from it.
func TestMarksWrittenBeforeTheWork(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	withFakeAgent(b)
	ctx := context.Background()
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	failed := configureSpec(pl, "m1", "exit3", []byte("blob"))
	failed.Marks = map[string]backend.FenceMark{"new-shard": {Epoch: 3, Sequence: 1}}
	if err := b.Configure(ctx, failed); err == nil {
		t.Fatal("configure with a failing hook succeeded")
	}
	if got := readMD(t, c, pl.Domain); got.Marks["new-shard"] != (backend.FenceMark{Epoch: 3, Sequence: 1}) || got.ClusterID != "" {
		t.Fatalf("after a failed first Configure: marks %v, binding %q", got.Marks, got.ClusterID)
	}
	if err := b.Configure(ctx, configureSpec(pl, "m1", "c1", []byte("blob"))); err != nil {
		t.Fatal(err)
	}
	cut, cancel := context.WithCancel(ctx)
	cancel() // the drain's deadline is over before its hook runs
	ds := backend.DrainSpec{MachineID: "m1", OperationID: "op-drain", Placement: pl, ClusterID: "c1", Grace: time.Second,
		Marks: map[string]backend.FenceMark{"new-shard": {Epoch: 3, Sequence: 2}}}
	if err := b.Drain(cut, ds); err == nil {
		t.Fatal("drain past its deadline succeeded")
	}
	if got := readMD(t, c, pl.Domain); got.Marks["new-shard"] != (backend.FenceMark{Epoch: 3, Sequence: 2}) || got.ClusterID != "c1" {
		t.Fatalf("after a failed Drain: marks %v, binding %q", got.Marks, got.ClusterID)
	}
}

// TestClearMark (issue 39): the admin API's fence clear removes one
// shard's mark from the domain's metadata, leaving the other marks and
// the binding; clearing a shard without a mark there changes nothing.
func TestClearMark(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	withFakeAgent(b)
	ctx := context.Background()
	c := testConn(t, b, "z1")
	s := spec("m1")
	s.Marks = map[string]backend.FenceMark{"s1": {Epoch: 5, Sequence: 1}, "invented": {Epoch: 1, Sequence: 1}}
	pl, err := b.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Configure(ctx, configureSpec(pl, "m1", "c1", []byte("blob"))); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second clear finds nothing to remove
		if err := b.ClearMark(ctx, "m1", pl, "invented"); err != nil {
			t.Fatal(err)
		}
		md := readMD(t, c, pl.Domain)
		if want := map[string]backend.FenceMark{"s1": {Epoch: 5, Sequence: 1}}; !maps.Equal(md.Marks, want) || md.ClusterID != "c1" {
			t.Fatalf("after the clear: marks %v, cluster %q; want %v and c1", md.Marks, md.ClusterID, want)
		}
	}
	if err := b.ClearMark(ctx, "m2", backend.Placement{Zone: "z1", Domain: pl.Domain}, "s1"); err == nil {
		t.Error("a clear naming another machine's domain succeeded")
	}
}
