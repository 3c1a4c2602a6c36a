package soakkit

import (
	"testing"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// Sequence numbers grow, a seed replays the draws, a Configure's blob stays
// within its bounds, and each mutation carries the shard's token.
func TestDrawsAndRequest(t *testing.T) {
	a, b := NewDraws(7, 1), NewDraws(7, 1)
	if x, y := a.Next(), a.Next(); x != 1 || y != 2 {
		t.Fatalf("Next: %d, %d; want 1, 2", x, y)
	}
	for i := 1; i <= 3; i++ {
		n, blob := a.Configure(100, nil)
		m, same := b.Configure(100, nil)
		if n != i || m != i || len(blob) < 1024 || len(blob) > 1124 || string(blob) != string(same) {
			t.Fatalf("Configure %d: n %d/%d, %d bytes, replayed %v", i, n, m, len(blob), string(blob) == string(same))
		}
	}
	bind := Binding{Cluster: "c1", Meta: map[string]string{"k": "v"}}
	for kind, check := range map[string]func(any) bool{
		"Create": func(m any) bool { r, ok := m.(*pb.CreateRequest); return ok && r.GetShardId() == "s" },
		"Configure": func(m any) bool {
			r, ok := m.(*pb.ConfigureRequest)
			return ok && r.GetClusterId() == "c1" && string(r.GetBootstrapBlob()) == "blob" && r.GetShardMetadata()["k"] == "v"
		},
		"Drain":  func(m any) bool { r, ok := m.(*pb.DrainRequest); return ok && r.GetGracePeriodSeconds() == 2 },
		"Delete": func(m any) bool { _, ok := m.(*pb.DeleteRequest); return ok },
	} {
		msg := Request("s", 3, "m1", kind, bind, []byte("blob"), 2)(9)
		tok, ok := msg.(interface {
			GetMachineId() string
			GetShardId() string
			GetShardEpoch() int64
			GetSequenceNumber() int64
		})
		if !ok || !check(msg) || tok.GetMachineId() != "m1" || tok.GetShardId() != "s" || tok.GetShardEpoch() != 3 || tok.GetSequenceNumber() != 9 {
			t.Errorf("%s: %v", kind, msg)
		}
	}
}
