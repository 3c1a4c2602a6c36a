package main

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func TestMigrate(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{AdminWrite: true, Fake: fake.Options{Hosts: []fake.Host{
		{Name: "a1", Zone: "zone-a", VCPUs: 8, MemoryMiB: 8192, PoolGiB: 10},
		{Name: "a2", Zone: "zone-a", VCPUs: 8, MemoryMiB: 8192, PoolGiB: 10},
		{Name: "b1", Zone: "zone-b", VCPUs: 8, MemoryMiB: 8192, PoolGiB: 10},
	}}})
	mustCtl(t, s, "create", "m-000")
	waitState(t, s, "m-000", record.Idle)
	vm, _ := s.Fake.VM("m-000")
	to := map[string]string{"a1": "a2", "a2": "a1"}[vm.Placement.Host]
	out := mustCtl(t, s, "migrate", "m-000", "--to", to)
	if !strings.Contains(out, "migrated m-000 from host "+vm.Placement.Host+" to host "+to) || !strings.Contains(out, "IDLE") {
		t.Errorf("migrate:\n%s", out)
	}
	if vm, _ := s.Fake.VM("m-000"); vm.Placement.Host != to {
		t.Errorf("vm on %s, want %s", vm.Placement.Host, to)
	}
	if _, err := ctl(t, s, "migrate", "m-001"); connect.CodeOf(err) != connect.CodeAborted {
		t.Errorf("migrate SPECULATIVE: %v", err)
	}
}
