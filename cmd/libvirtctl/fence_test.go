package main

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// TestFenceClear: "fence clear ID --shard S" removes S's mark (marks no
// longer lists it) and says what it removed; without --shard it is a
// usage error; without --admin-write it is PermissionDenied and the mark
// stays; a shard without a mark there is NotFound.
func TestFenceClear(t *testing.T) {
	t.Parallel()
	ro := admintest.Start(t, admintest.Options{})
	mustCtl(t, ro, "create", "m-000", "--shard", "s1", "--epoch", "3", "--seq", "7")
	if _, err := ctl(t, ro, "fence", "clear", "m-000", "--shard", "s1"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("clear without --admin-write: %v", err)
	}
	if out := mustCtl(t, ro, "marks"); !strings.Contains(out, "s1") {
		t.Errorf("a refused clear removed the mark:\n%s", out)
	}

	s := admintest.Start(t, admintest.Options{AdminWrite: true})
	mustCtl(t, s, "create", "m-000", "--shard", "s1", "--epoch", "3", "--seq", "7")
	waitState(t, s, "m-000", record.Idle)
	if _, err := ctl(t, s, "fence", "clear", "m-000"); err == nil || !strings.Contains(err.Error(), "--shard") {
		t.Errorf("clear without --shard: %v", err)
	}
	out := mustCtl(t, s, "fence", "clear", "m-000", "--shard", "s1")
	if !strings.Contains(out, `cleared the fence mark of shard "s1" on m-000 (epoch 3, sequence 7); 0 of 32 shards`) {
		t.Errorf("clear:\n%s", out)
	}
	if out := mustCtl(t, s, "marks"); strings.Contains(out, "s1") {
		t.Errorf("marks after the clear:\n%s", out)
	}
	if out := mustCtl(t, s, "history", "m-000"); !strings.Contains(out, "fence-clear") {
		t.Errorf("history lacks the clear:\n%s", out)
	}
	if _, err := ctl(t, s, "fence", "clear", "m-000", "--shard", "s1"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("second clear: %v", err)
	}
}
