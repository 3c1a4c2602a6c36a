package admin

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
)

// TestReconcileToProto: every count of a pass reaches the summary, the
// restarts and the domains still not running included, zones sorted.
func TestReconcileToProto(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	got := reconcileToProto(lifecycle.ReconcileReport{At: at, Adopted: 1, Vanished: 2, Restarted: 3, NotRunning: 4,
		Zones: map[string]string{"zone-b": "connection refused", "zone-a": ""}})
	want := &adminv1.ReconcileSummary{Time: ts(at), Adopted: 1, Vanished: 2, Restarted: 3, NotRunning: 4,
		Zones: []*adminv1.ZoneOutcome{{Zone: "zone-a"}, {Zone: "zone-b", Error: "connection refused"}}}
	if !proto.Equal(got, want) {
		t.Errorf("reconcileToProto = %v, want %v", got, want)
	}
	if never := reconcileToProto(lifecycle.ReconcileReport{}); never.GetTime() != nil || never.GetRestarted() != 0 {
		t.Errorf("before any pass: %v", never)
	}
}
