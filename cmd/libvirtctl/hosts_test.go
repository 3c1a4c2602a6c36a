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

// poolHosts are two hosts in zone-a and one in zone-b (the zones of
// admintest's slots), 16 vCPUs ×4 and 64 GiB each.
func poolHosts() []fake.Host {
	h := func(name, zone string) fake.Host {
		return fake.Host{Name: name, Zone: zone, VCPUs: 16, MemoryMiB: 65536, PoolGiB: 500, CPUOvercommit: 4, MemoryOvercommit: 1,
			Labels: map[string]string{"rack": "r1"}}
	}
	return []fake.Host{h("kvm-a1", "zone-a"), h("kvm-a2", "zone-a"), h("kvm-b1", "zone-b")}
}

func line(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// TestHostsCordonDrainList: hosts shows each host's use against what is
// placeable; cordon says what must move off and placement then avoids the
// host; drain-list lists it; uncordon undoes it; the writes are gated.
func TestHostsCordonDrainList(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{AdminWrite: true, Machines: 6, Fake: fake.Options{Hosts: poolHosts()}})
	mustCtl(t, s, "create", "m-000") // zone-a: spread, a tie, the first name
	waitState(t, s, "m-000", record.Idle)

	out := mustCtl(t, s, "hosts")
	a1 := line(out, "zone-a  kvm-a1")
	for _, want := range []string{"fake://kvm-a1", "yes", " no ", "2/64", "2.0GiB/64.0GiB", "500.0GiB", "  1  "} {
		if !strings.Contains(a1, want) {
			t.Errorf("kvm-a1 row lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(line(out, "zone-b  kvm-b1"), "0/64") || !strings.HasPrefix(out, "ZONE ") {
		t.Errorf("hosts:\n%s", out)
	}

	out = mustCtl(t, s, "cordon", "kvm-a1", "--reason", "kernel upgrade")
	if !strings.Contains(out, "yes, by "+admintest.TestCaller+": kernel upgrade") ||
		!strings.Contains(out, "1 machines are on kvm-a1; 'libvirtctl drain-list kvm-a1' lists them") {
		t.Errorf("cordon:\n%s", out)
	}
	// The next zone-a Create goes to kvm-a2, though kvm-a1 is as empty.
	mustCtl(t, s, "create", "m-002")
	waitState(t, s, "m-002", record.Idle)
	if m, _ := s.Engine.Get(t.Context(), "m-002"); m.HostName != "kvm-a2" {
		t.Errorf("m-002 placed on %q, want kvm-a2 (kvm-a1 is cordoned)", m.HostName)
	}

	out = mustCtl(t, s, "drain-list", "kvm-a1")
	if !strings.Contains(out, "m-000") || strings.Contains(out, "m-002") || !strings.Contains(out, "1 machines on kvm-a1") ||
		!strings.Contains(out, "zone-a/kvm-a1/bf-m-000") {
		t.Errorf("drain-list kvm-a1:\n%s", out)
	}
	out = mustCtl(t, s, "drain-list", "kvm-a2", "-o", "json")
	var dj struct {
		Machines []struct {
			Host string `json:"host"`
		} `json:"machines"`
	}
	if err := json.Unmarshal([]byte(out), &dj); err != nil || len(dj.Machines) != 1 || dj.Machines[0].Host != "kvm-a2" {
		t.Errorf("drain-list -o json: %v\n%s", err, out)
	}
	if _, err := ctl(t, s, "drain-list", "kvm-zz"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("drain-list of an unknown host: %v", err)
	}
	if _, err := ctl(t, s, "cordon", "kvm-zz"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("cordon of an unknown host: %v", err)
	}

	out = mustCtl(t, s, "uncordon", "kvm-a1", "-o", "json")
	var hj struct {
		Name     string `json:"name"`
		Cordoned bool   `json:"cordoned"`
	}
	if err := json.Unmarshal([]byte(out), &hj); err != nil || hj.Name != "kvm-a1" || hj.Cordoned {
		t.Errorf("uncordon -o json: %v\n%s", err, out)
	}

	ro := admintest.Start(t, admintest.Options{Fake: fake.Options{Hosts: poolHosts()}})
	for _, args := range [][]string{{"cordon", "kvm-a1"}, {"uncordon", "kvm-a1"}} {
		if _, err := ctl(t, ro, args...); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%v without --admin-write: %v", args, err)
		}
	}
	if _, err := ctl(t, ro, "cordon"); err == nil {
		t.Error("cordon without a host: no usage error")
	}
}
