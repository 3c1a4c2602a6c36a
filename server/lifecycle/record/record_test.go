package record

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Every cap refuses one byte (or entry) over it as InvalidArgument naming
// the field and the cap, and accepts a request exactly at it.
func TestCaps(t *testing.T) {
	t.Parallel()
	ok := ConfigureRequest{ClusterID: "c"}
	n := func(k int) string { return strings.Repeat("x", k) }
	many := func(k int) map[string]string {
		m := map[string]string{}
		for i := range k {
			m[fmt.Sprint(i)] = ""
		}
		return m
	}
	for _, c := range []struct {
		name string
		err  *Error
		want string // "" when accepted
	}{
		{"id at cap", ValidateID("machine_id", n(MaxMachineIDBytes)), ""},
		{"id over cap", ValidateID("machine_id", n(MaxMachineIDBytes+1)), "machine_id is 254 bytes; the limit is 253"},
		{"id empty", ValidateID("machine_id", ""), "machine_id is required"},
		{"no token", ValidateToken(Token{}), ""},
		{"shard at cap", ValidateToken(Token{ShardID: n(MaxShardIDBytes)}), ""},
		{"shard over cap", ValidateToken(Token{ShardID: n(MaxShardIDBytes + 1)}), "shard_id is 257 bytes"},
		{"cluster at cap", ValidateConfigure(ConfigureRequest{ClusterID: n(MaxClusterIDBytes)}), ""},
		{"cluster over cap", ValidateConfigure(ConfigureRequest{ClusterID: n(MaxClusterIDBytes + 1)}), "cluster_id is 254 bytes"},
		{"blob at cap", ValidateConfigure(ConfigureRequest{ClusterID: "c", BootstrapBlob: make([]byte, MaxBootstrapBlobBytes)}), ""},
		{"blob over cap", ValidateConfigure(ConfigureRequest{ClusterID: "c", BootstrapBlob: make([]byte, MaxBootstrapBlobBytes+1)}), "bootstrap_blob is"},
		{"entries at cap", ValidateConfigure(ConfigureRequest{ClusterID: "c", ShardMetadata: many(MaxShardMetadataEntries)}), ""},
		{"entries over cap", ValidateConfigure(ConfigureRequest{ClusterID: "c", ShardMetadata: many(MaxShardMetadataEntries + 1)}), "shard_metadata has 257 entries"},
		{"key over cap", ValidateConfigure(ConfigureRequest{ClusterID: "c", ShardMetadata: map[string]string{n(MaxShardMetadataKey + 1): ""}}), "a shard_metadata key is 257 bytes"},
		{"value over cap", ValidateConfigure(ConfigureRequest{ClusterID: "c", ShardMetadata: map[string]string{"k": n(MaxShardMetadataValue + 1)}}), "a shard_metadata value is"},
		{"total over cap", ValidateConfigure(ConfigureRequest{ClusterID: "c", ShardMetadata: func() map[string]string {
			m := map[string]string{}
			for i := range MaxShardMetadataBytes/MaxShardMetadataValue + 1 {
				m[fmt.Sprint(i)] = n(MaxShardMetadataValue)
			}
			return m
		}()}), "shard_metadata (keys and values) is"},
		{"plain configure", ValidateConfigure(ok), ""},
	} {
		switch {
		case c.want == "" && c.err != nil:
			t.Errorf("%s: refused: %v", c.name, c.err)
		case c.want != "" && (c.err == nil || c.err.Code != CodeInvalid || !strings.Contains(c.err.Msg, c.want)):
			t.Errorf("%s: err = %v, want InvalidArgument containing %q", c.name, c.err, c.want)
		}
	}
}

// A cluster id is required, valid UTF-8 and free of control characters
// (C0, DEL, C1), which the error names with its byte offset.
func TestClusterIDCharset(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{
		"":                "cluster_id is required",
		"a\xffb":          "not valid UTF-8",
		"a\x00b":          "U+0000 at byte 1",
		"ok\nbad":         "U+000A at byte 2",
		"del\x7f":         "U+007F at byte 3",
		"c1\u0085":        "U+0085 at byte 2",
		"prod-eu.example": "",
		"žluťoučký 🐴":     "",
	} {
		err := ValidateConfigure(ConfigureRequest{ClusterID: id})
		if want == "" {
			if err != nil {
				t.Errorf("%q refused: %v", id, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Msg, want) {
			t.Errorf("%q: err = %v, want it to say %q", id, err, want)
		}
	}
}

func TestExpectMatches(t *testing.T) {
	t.Parallel()
	cur := &Machine{OperationID: "op", Revision: 7, State: Idle}
	idle := func(m *Machine) bool { return m.State == Idle }
	for _, c := range []struct {
		x    Expect
		want bool
	}{
		{Expect{}, true},
		{Expect{OperationID: "op", Revision: 7, Holds: idle}, true},
		{Expect{OperationID: "other"}, false},
		{Expect{Revision: 8}, false},
		{Expect{Holds: func(m *Machine) bool { return m.State == Failed }}, false},
	} {
		if got := c.x.Matches(cur); got != c.want {
			t.Errorf("%+v.Matches = %v, want %v", c.x, got, c.want)
		}
	}
}

// AppendHistory keeps the newest HistoryLimit entries and never writes
// into the array of the history it was given (the published record's).
func TestAppendHistoryNeverWritesShared(t *testing.T) {
	t.Parallel()
	var h []Transition
	for i := range HistoryLimit {
		h = append(h, Transition{OperationID: fmt.Sprint(i)})
	}
	published := slices.Clone(h)
	short := h[:5:cap(h)] // room behind it: a plain append would overwrite h[5]
	if got := AppendHistory(short, Transition{OperationID: "new"}); got[5].OperationID != "new" || h[5].OperationID != "5" {
		t.Fatal("AppendHistory wrote into the shared array")
	}
	full := AppendHistory(h, Transition{OperationID: "new"})
	if len(full) != HistoryLimit || full[0].OperationID != "1" || full[HistoryLimit-1].OperationID != "new" {
		t.Errorf("full history: %d entries, first %q, last %q", len(full), full[0].OperationID, full[HistoryLimit-1].OperationID)
	}
	if !slices.Equal(h, published) {
		t.Error("appending to a full history changed the original")
	}
}

// Clone shares nothing with its original; Edit shares the maps but its
// history cannot be written through (LastTransition copies first).
func TestCloneAndEdit(t *testing.T) {
	t.Parallel()
	m := Machine{Labels: map[string]string{"a": "1"}, ShardMetadata: map[string]string{"k": "v"},
		History: []Transition{{Outcome: "running"}}}
	c := m.Clone()
	c.Labels["a"], c.ShardMetadata["k"], c.History[0].Outcome = "x", "x", "x"
	if m.Labels["a"] != "1" || m.ShardMetadata["k"] != "v" || m.History[0].Outcome != "running" {
		t.Error("Clone aliases its original")
	}
	e := m.Edit()
	e.LastTransition().Outcome = "succeeded"
	if m.History[0].Outcome != "running" {
		t.Error("an edit's LastTransition wrote into the published history")
	}
	if (&Machine{}).LastTransition() != nil {
		t.Error("LastTransition of an empty history is not nil")
	}
}

func TestStates(t *testing.T) {
	t.Parallel()
	var trans []State
	for _, s := range AllStates {
		if s.Transitional() {
			trans = append(trans, s)
		}
	}
	if !slices.Equal(trans, []State{Creating, Configuring, Draining, Deleting}) {
		t.Errorf("transitional states %v", trans)
	}
	if Failed.String() != "FAILED" || State(99).String() == "" {
		t.Errorf("names: %q, %q", Failed.String(), State(99).String())
	}
}

// The guest's addresses come from the latest successful Configure, and a
// later Create or completed Delete forgets them.
func TestGuestAddresses(t *testing.T) {
	t.Parallel()
	conf := func(outcome string, addrs ...string) Transition {
		return Transition{Kind: OpConfigure, Outcome: outcome, Note: NoteAddresses(addrs)}
	}
	for _, c := range []struct {
		name string
		h    []Transition
		want []string
	}{
		{"configured", []Transition{{Kind: OpCreate}, conf("succeeded", "eth0 192.0.2.10/24", "eth1 fe80::1/64")},
			[]string{"eth0 192.0.2.10/24", "eth1 fe80::1/64"}},
		{"failed configure after a good one", []Transition{conf("succeeded", "a"), conf("failed")}, []string{"a"}},
		{"deleted since", []Transition{conf("succeeded", "a"), {Kind: OpDelete, Outcome: "succeeded"}}, nil},
		{"recreated since", []Transition{conf("succeeded", "a"), {Kind: OpCreate, Outcome: "succeeded"}}, nil},
		{"read nothing", []Transition{conf("succeeded")}, nil},
		{"never configured", nil, nil},
	} {
		m := Machine{History: c.h}
		if got := m.GuestAddresses(); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// Encoded computes once per published record, and a copy that drops the
// cache never serves its original's bytes.
func TestEncodedCache(t *testing.T) {
	t.Parallel()
	calls := 0
	enc := func(m *Machine) []byte { calls++; return []byte(m.ID) }
	m := Machine{ID: "a"}
	m.AttachEncodingCache()
	m.Encoded(enc)
	if b := m.Encoded(enc); string(b) != "a" || calls != 1 {
		t.Errorf("published record encoded %d times", calls)
	}
	e := m.Edit()
	e.ID = "b"
	if b := e.Encoded(enc); string(b) != "b" {
		t.Errorf("an edited copy served %q, its original's bytes", b)
	}
	c := m.Clone()
	c.ID = "c"
	if b := c.Encoded(enc); string(b) != "c" {
		t.Errorf("a clone served %q", b)
	}
}
