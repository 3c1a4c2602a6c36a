package lifecycle

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/index"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// countingEnc encodes a record's id, state and revision and counts calls.
type countingEnc struct{ calls atomic.Int64 }

func (c *countingEnc) enc(m *record.Machine) []byte {
	c.calls.Add(1)
	return fmt.Appendf(nil, "%s/%s/%d/%s", m.ID, m.State, m.Revision, m.Cluster)
}

// TestEncodedOncePerRevision: a published record is encoded once however
// often it is read; its next revision is encoded afresh, so the bytes a
// reader gets always describe the record it holds.
func TestEncodedOncePerRevision(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	ctx := context.Background()
	var c countingEnc
	m, err := f.e.GetShared(ctx, "m000")
	if err != nil {
		t.Fatal(err)
	}
	first := m.Encoded(c.enc)
	for range 5 {
		again, _ := f.e.GetShared(ctx, "m000")
		if got := again.Encoded(c.enc); string(got) != string(first) {
			t.Fatalf("cached %q, then %q", first, got)
		}
	}
	if n := c.calls.Load(); n != 1 {
		t.Fatalf("encoded %d times for one revision, want 1", n)
	}
	f.toConfigured("m000", "c1")
	now, _ := f.e.GetShared(ctx, "m000")
	want := c.enc(now)
	if got := now.Encoded(c.enc); string(got) != string(want) || string(got) == string(first) {
		t.Fatalf("after a change: served %q, want %q (first was %q)", got, want, first)
	}
	// The old record is still what it was: a reader that held it is
	// consistent with itself.
	if got := m.Encoded(c.enc); string(got) != string(first) {
		t.Fatalf("old record now serves %q, want %q", got, first)
	}
	lst, err := f.e.ListShared(ctx, record.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range lst.Machines {
		if got, want := r.Encoded(c.enc), c.enc(r); string(got) != string(want) {
			t.Fatalf("List record %s serves %q, want %q", r.ID, got, want)
		}
	}
}

// TestCopiesHaveNoCache: a copy made to build the next version (edit,
// Clone, or a plain struct copy that gets published) never serves the
// bytes of the record it was copied from.
func TestCopiesHaveNoCache(t *testing.T) {
	t.Parallel()
	ix := index.New(seed(1))
	pub, _ := ix.Get("m000")
	var c countingEnc
	old := string(pub.Encoded(c.enc))

	for name, cp := range map[string]record.Machine{"edit": pub.Edit(), "Clone": pub.Clone()} {
		cp.State = record.Failed
		if got := string(cp.Encoded(c.enc)); got == old {
			t.Errorf("%s copy serves its original's bytes %q", name, got)
		}
	}
	plain := *pub // a raw copy still carries the cache pointer...
	plain.State = record.Idle
	plain.Revision = ix.Reserve()
	ix.Publish(&plain) // ...until it is published, which gives it its own
	cur, _ := ix.Get("m000")
	if got, want := string(cur.Encoded(c.enc)), string(c.enc(cur)); got != want {
		t.Fatalf("published copy serves %q, want %q", got, want)
	}
	lst, _ := ix.List(0, nil, 0)
	if len(lst) != 1 || lst[0] != cur {
		t.Fatalf("list holds %v, want the new record", lst)
	}
}

// TestEncodedFailureNotCached: an encoder that fails (nil) is asked again
// next time rather than its failure being served forever.
func TestEncodedFailureNotCached(t *testing.T) {
	t.Parallel()
	ix := index.New(seed(1))
	pub, _ := ix.Get("m000")
	var calls int
	fail := func(*record.Machine) []byte { calls++; return nil }
	if pub.Encoded(fail) != nil || pub.Encoded(fail) != nil || calls != 2 {
		t.Fatalf("failing encoder: %d calls, want 2 and nil results", calls)
	}
	var c countingEnc
	if got := pub.Encoded(c.enc); string(got) != string(c.enc(pub)) {
		t.Fatalf("after failures: %q", got)
	}
}
