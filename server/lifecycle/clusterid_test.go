package lifecycle

import (
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// TestClusterIDCharset (issue 15 case 8): a cluster_id with a control
// character (C0, DEL, C1) is InvalidArgument naming the field, and changes
// nothing, not even the fence mark; any other valid UTF-8 is accepted
// verbatim.
func TestClusterIDCharset(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id      string
		refused string // "" = accepted; else a part of the message
	}{
		{"a\nb\x00c", "U+000A at byte 1"},
		{"abc\x00", "U+0000 at byte 3"},
		{"\x00", "U+0000 at byte 0"},
		{"tab\there", "U+0009"},
		{"cr\r", "U+000D"},
		{"esc\x1b[31m", "U+001B"},
		{"unit\x1f", "U+001F"},
		{"del\x7f", "U+007F"},
		{"c1\u0080", "U+0080"},
		{"nel\u0085", "U+0085"},
		{"csi\u009b", "U+009B"},
		{"bad\xffutf8", "not valid UTF-8"},
		{"", "required"},
		{strings.Repeat("x", record.MaxClusterIDBytes+1), "the limit is 253"},
		{"prod-eu-1", ""},
		{"Cluster_01.k8s:v2/blue", ""},
		{" spaced out ", ""},
		{"ünïcødé 集群 🚀", ""},
		{"nbsp\u00a0ok", ""},
		{"\u200bzero-width", ""},
		{strings.Repeat("y", record.MaxClusterIDBytes), ""},
	}
	for i, tc := range tests {
		f := newFixture(t, 1)
		f.toIdle("m000")
		ack, err := f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: tc.id, Token: tok("s", 1, int64(i))})
		if tc.refused == "" {
			if err != nil {
				t.Fatalf("cluster_id %q refused: %v", tc.id, err)
			}
			if ack.Machine.Cluster != tc.id {
				t.Fatalf("cluster_id %q stored as %q", tc.id, ack.Machine.Cluster)
			}
			continue
		}
		if codeOf(err) != record.CodeInvalid || !strings.Contains(err.Error(), "cluster_id") || !strings.Contains(err.Error(), tc.refused) {
			t.Fatalf("cluster_id %q: %v, want InvalidArgument naming cluster_id and %q", tc.id, err, tc.refused)
		}
		m, _ := f.e.Get(t.Context(), "m000")
		if m.State != record.Idle || m.Cluster != "" || len(f.e.Marks()) != 0 {
			t.Fatalf("refused cluster_id %q changed something: %s %q, marks %v", tc.id, m.State, m.Cluster, f.e.Marks())
		}
	}
}
