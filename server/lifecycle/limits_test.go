package lifecycle

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// storedMarks is the number of fence marks the store holds.
func (s *memStore) storedMarks() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.marks) }

// heldMarks counts the marks the engine holds, durable and in memory.
func (f *fixture) heldMarks() int { return len(f.e.Marks()) + f.e.fences.UnknownLen() }

// TestInputCaps: every cap, exceeded by one byte (or entry), is
// InvalidArgument naming the field and the cap, and changes nothing: no
// transition, no fence mark (the same token is accepted afterwards).
func TestInputCaps(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	ctx := t.Context()
	f.toIdle("m000")
	long := func(n int) string { return strings.Repeat("x", n) }
	meta := func(n, k, v int) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			key := fmt.Sprintf("%04d", i) + long(k-4)
			m[key] = long(v)
		}
		return m
	}
	configure := func(cluster string, md map[string]string) func(record.Token) error {
		return func(tk record.Token) error {
			_, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: cluster, ShardMetadata: md, Token: tk})
			return err
		}
	}
	cases := []struct {
		name string
		call func(record.Token) error
		want []string // substrings of the message
	}{
		{"shard_id", func(tk record.Token) error {
			tk.ShardID = long(40000)
			_, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m001", Token: tk})
			return err
		}, []string{"shard_id is 40000 bytes", "limit is 256"}},
		{"create machine_id", func(tk record.Token) error {
			_, err := f.e.Create(ctx, record.CreateRequest{MachineID: long(254), Token: tk})
			return err
		}, []string{"machine_id is 254 bytes", "limit is 253"}},
		{"drain machine_id", func(tk record.Token) error {
			_, err := f.e.Drain(ctx, record.DrainRequest{MachineID: long(1 << 20), Token: tk})
			return err
		}, []string{"machine_id is 1048576 bytes", "limit is 253"}},
		{"delete machine_id", func(tk record.Token) error {
			_, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: long(254), Token: tk})
			return err
		}, []string{"machine_id is 254 bytes", "limit is 253"}},
		{"get id", func(record.Token) error { _, err := f.e.Get(ctx, long(254)); return err },
			[]string{"id is 254 bytes", "limit is 253"}},
		{"cluster_id", configure(long(254), nil), []string{"cluster_id is 254 bytes", "limit is 253"}},
		{"metadata entries", configure("c", meta(257, 5, 0)), []string{"shard_metadata has 257 entries", "limit is 256"}},
		{"metadata key", configure("c", meta(1, 257, 0)), []string{"shard_metadata key", "257 bytes", "limit is 256"}},
		{"metadata value", configure("c", meta(1, 5, 4097)), []string{"shard_metadata value", "4097 bytes", "limit is 4096"}},
		{"metadata total", configure("c", meta(17, 8, 4000)), []string{"shard_metadata", "68136 bytes", "limit is 65536"}},
	}
	for i, c := range cases {
		tk := tok("s", int64(i+1), 1)
		before, _ := f.e.List(ctx, record.ListQuery{})
		marks, commits, held := f.st.storedMarks(), f.st.attempted(), f.heldMarks()
		err := c.call(tk)
		if codeOf(err) != record.CodeInvalid {
			t.Errorf("%s: %v, want InvalidArgument", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: message %q lacks %q", c.name, err, w)
			}
		}
		if after, _ := f.e.List(ctx, record.ListQuery{Since: before.Revision}); len(after.Machines) != 0 {
			t.Errorf("%s: a refused request changed %d machines", c.name, len(after.Machines))
		}
		if f.st.storedMarks() != marks || f.st.attempted() != commits {
			t.Errorf("%s: a refused request wrote to the store", c.name)
		}
		if got := f.heldMarks(); got != held {
			t.Errorf("%s: a refused request left a fence mark (%d → %d held)", c.name, held, got)
		}
	}
}

// TestInputsAtTheCapsAreAccepted: the caps are inclusive.
func TestInputsAtTheCapsAreAccepted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	ctx := t.Context()
	shard := strings.Repeat("s", record.MaxShardIDBytes)
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok(shard, 1, 1)}); err != nil {
		t.Fatal(err)
	}
	f.waitState("m000", record.Idle)
	if _, err := f.e.Get(ctx, strings.Repeat("i", record.MaxMachineIDBytes)); codeOf(err) != record.CodeNotFound {
		t.Fatalf("id at the cap: %v", err)
	}
	md := map[string]string{strings.Repeat("k", record.MaxShardMetadataKey): strings.Repeat("v", record.MaxShardMetadataValue)}
	for i := range record.MaxShardMetadataEntries - 1 {
		md[fmt.Sprint(i)] = ""
	}
	_, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: strings.Repeat("c", record.MaxClusterIDBytes),
		ShardMetadata: md, Token: tok(shard, 1, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if m := f.waitState("m000", record.Configured); len(m.ShardMetadata) != record.MaxShardMetadataEntries {
		t.Fatalf("metadata has %d entries", len(m.ShardMetadata))
	}
}

// TestOverCapShardIDIsFencedFirst: a store written before the shard_id cap
// existed may hold a mark for a longer shard id. The fence still answers
// first for it; only a token that passes is refused for its length.
func TestOverCapShardIDIsFencedFirst(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	shard := strings.Repeat("s", record.MaxShardIDBytes+1)
	f.st.marks[record.MarkKey{ShardID: shard, MachineID: "m000"}] = record.Mark{Epoch: 5, Sequence: 5}
	f.start(1)
	if _, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000", Token: tok(shard, 5, 5)}); codeOf(err) != record.CodeFenced {
		t.Fatalf("stale token with an over-cap shard_id: %v", err)
	}
	if _, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000", Token: tok(shard, 6, 0)}); codeOf(err) != record.CodeInvalid {
		t.Fatalf("newer token with an over-cap shard_id: %v", err)
	}
}

// TestSeedIDOverCapRefused: a slot whose id is over the cap could never be
// addressed; the engine refuses to start with it rather than serve it.
func TestSeedIDOverCapRefused(t *testing.T) {
	t.Parallel()
	s := seed(1)
	s[0].ID = strings.Repeat("m", record.MaxMachineIDBytes+1)
	if _, err := New(Config{Provider: "test", Seed: s}, newMemStore(), newTestBackend()); err == nil ||
		!strings.Contains(err.Error(), "limit is 253") {
		t.Fatalf("New with an over-cap seed id: %v", err)
	}
}

// TestFenceBeforeTokenValues (contract, fencing): the fence runs before any
// check of the token's own values.
func TestFenceBeforeTokenValues(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	ctx := t.Context()
	del := func(id string, tk record.Token) error {
		_, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: id, Token: tk})
		return err
	}
	for _, id := range []string{"m000", "ghost"} {
		if err := del(id, tok("s", 6, 1)); codeOf(err) == record.CodeFenced || codeOf(err) == record.CodeInvalid {
			t.Fatalf("%s: first contact: %v", id, err)
		}
		for _, tk := range []record.Token{tok("s", 6, -1), tok("s", -1, 9), tok("s", 6, 1), tok("s", -5, -5)} {
			if err := del(id, tk); codeOf(err) != record.CodeFenced {
				t.Errorf("%s: %+v after (6,1): %v, want FailedPrecondition", id, tk, err)
			}
		}
		// A negative part is an ordinary value (CONTRACT.md): (7,-1) is
		// newer than (6,1) and passes, and it is the mark after.
		if err := del(id, tok("s", 7, -1)); codeOf(err) == record.CodeFenced || codeOf(err) == record.CodeInvalid {
			t.Errorf("%s: (7,-1) after (6,1): %v, want it past the fence", id, err)
		}
		if err := del(id, tok("s", 6, 2)); codeOf(err) != record.CodeFenced {
			t.Errorf("%s: (6,2) after (7,-1): %v, want FailedPrecondition", id, err)
		}
		if err := del(id, tok("s", 7, 0)); codeOf(err) == record.CodeFenced || codeOf(err) == record.CodeInvalid {
			t.Errorf("%s: (7,0) after (7,-1): %v, want it past the fence", id, err)
		}
	}
}

// TestUnknownIDMarksBounded: marks for machine ids that do not exist never
// reach the store, and are kept in memory only up to a bound, while the
// fence still answers before not-found.
func TestUnknownIDMarksBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, func(c *Config) { c.UnknownMarkLimit = 200 })
	ctx := t.Context()
	marks, commits := f.st.storedMarks(), f.st.attempted()
	for i := range 100 {
		_, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: fmt.Sprintf("ghost-%d", i), Token: tok("s", int64(i), 1)})
		if codeOf(err) != record.CodeNotFound {
			t.Fatalf("ghost-%d: %v", i, err)
		}
	}
	if f.st.storedMarks() != marks || f.st.attempted() != commits {
		t.Fatalf("100 NotFound calls wrote to the store: marks %d→%d, commits %d→%d",
			marks, f.st.storedMarks(), commits, f.st.attempted())
	}
	for i := range 100 {
		_, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: fmt.Sprintf("ghost-%d", i), Token: tok("s", int64(i), 1)})
		if codeOf(err) != record.CodeFenced {
			t.Fatalf("stale replay at ghost-%d: %v", i, err)
		}
	}
	// Known machines keep durable marks.
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok("s", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	if f.st.storedMarks() != marks+1 {
		t.Fatalf("a known machine's mark was not stored")
	}
}

// TestUnknownIDMarksEvictOldest: past the bound the least recently used
// mark is forgotten (its stale replay is first contact again: NotFound,
// which changes nothing either); the recent ones still fence.
func TestUnknownIDMarksEvictOldest(t *testing.T) {
	t.Parallel()
	const limit = 10
	f := newFixture(t, 1, func(c *Config) { c.UnknownMarkLimit = limit })
	ctx := t.Context()
	del := func(i int) error {
		_, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: fmt.Sprintf("ghost-%d", i), Token: tok("s", 1, 1)})
		return err
	}
	for i := range limit + 1 {
		if err := del(i); codeOf(err) != record.CodeNotFound {
			t.Fatalf("ghost-%d: %v", i, err)
		}
	}
	if err := del(0); codeOf(err) != record.CodeNotFound {
		t.Fatalf("the oldest mark must have been evicted: %v", err)
	}
	for i := 2; i <= limit; i++ {
		if err := del(i); codeOf(err) != record.CodeFenced {
			t.Fatalf("ghost-%d within the bound: %v", i, err)
		}
	}
	if n := f.e.fences.UnknownLen(); n != limit {
		t.Fatalf("%d unknown-id marks held, limit %d", n, limit)
	}
}

// TestStoreTooLargeIsInvalidArgument: a store that refuses a record as too
// large (record.ErrTooLarge) makes the request InvalidArgument naming
// what was too large, not Unavailable (which BigFleet retries forever); any
// other store failure stays Unavailable.
func TestStoreTooLargeIsInvalidArgument(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.st.setFail(fmt.Errorf("store: machine id is 40000 bytes; the store's key limit is 32768: %w", record.ErrTooLarge))
	_, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000", Token: tok("s", 1, 1)})
	if codeOf(err) != record.CodeInvalid || !strings.Contains(err.Error(), "machine id is 40000 bytes") {
		t.Fatalf("too large: %v", err)
	}
	f.st.setFail(fmt.Errorf("disk on fire"))
	_, err = f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000", Token: tok("s", 1, 2)})
	if codeOf(err) != record.CodeUnavailable {
		t.Fatalf("ordinary failure: %v", err)
	}
	f.st.setFail(nil)
	if _, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000", Token: tok("s", 1, 1)}); err != nil {
		t.Fatalf("a refused commit must not have advanced the mark: %v", err)
	}
}
