package main

import (
	"encoding/json"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// TestDownUp: down needs a reason (the provider's InvalidArgument, naming
// it), then shows the host declared down with who and why, in its answer
// and in hosts; placement avoids the host; up ends the declaration; an
// unknown host is NotFound; the writes are gated.
func TestDownUp(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{AdminWrite: true, Machines: 6, Fake: fake.Options{Hosts: poolHosts()}})

	_, err := ctl(t, s, "down", "kvm-a1")
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "reason is required") {
		t.Errorf("down without --reason: %v", err)
	}
	if _, err := ctl(t, s, "down", "kvm-zz", "--reason", "off"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("down of an unknown host: %v", err)
	}
	out := mustCtl(t, s, "down", "kvm-a1", "--reason", "powered off via IPMI")
	if !strings.Contains(line(out, "zone-a  kvm-a1"), "yes, by "+admintest.TestCaller+": powered off via IPMI") ||
		!strings.Contains(out, "kvm-a1 is declared down; 'libvirtctl up kvm-a1' ends the declaration") {
		t.Errorf("down:\n%s", out)
	}
	out = mustCtl(t, s, "hosts")
	if !strings.Contains(out, " DOWN ") || !strings.Contains(line(out, "zone-a  kvm-a1"), "powered off via IPMI") ||
		strings.Contains(line(out, "zone-a  kvm-a2"), "by ") {
		t.Errorf("hosts:\n%s", out)
	}
	// The next zone-a Create goes to kvm-a2, though spread would pick kvm-a1.
	mustCtl(t, s, "create", "m-000")
	waitState(t, s, "m-000", record.Idle)
	if m, _ := s.Engine.Get(t.Context(), "m-000"); m.HostName != "kvm-a2" {
		t.Errorf("m-000 placed on %q, want kvm-a2 (kvm-a1 is declared down)", m.HostName)
	}

	out = mustCtl(t, s, "up", "kvm-a1", "-o", "json")
	var hj struct {
		Name  string          `json:"name"`
		State string          `json:"state"`
		Down  json.RawMessage `json:"down"`
	}
	if err := json.Unmarshal([]byte(out), &hj); err != nil || hj.Name != "kvm-a1" || hj.State != "up" || hj.Down != nil {
		t.Errorf("up -o json: %v\n%s", err, out)
	}

	ro := admintest.Start(t, admintest.Options{Fake: fake.Options{Hosts: poolHosts()}})
	for _, args := range [][]string{{"down", "kvm-a1", "--reason", "off"}, {"up", "kvm-a1"}} {
		if _, err := ctl(t, ro, args...); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%v without --admin-write: %v", args, err)
		}
	}
	if _, err := ctl(t, ro, "up"); err == nil {
		t.Error("up without a host: no usage error")
	}
}
