package admin_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
)

func twoHostFake() fake.Options {
	return fake.Options{Hosts: []fake.Host{
		{Name: "a1", Zone: "zone-a", VCPUs: 8, MemoryMiB: 8192, PoolGiB: 10},
		{Name: "a2", Zone: "zone-a", VCPUs: 8, MemoryMiB: 8192, PoolGiB: 10},
		{Name: "b1", Zone: "zone-b", VCPUs: 8, MemoryMiB: 8192, PoolGiB: 10},
	}}
}

// TestMigrateMachine: an admin write moves an IDLE machine to the other
// host of its zone (BigFleet's Get shows only the new ref), refuses what
// may not move with the right code, and is logged and counted.
func TestMigrateMachine(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			s := admintest.Start(t, admintest.Options{AdminWrite: true, Fake: twoHostFake()})
			c := adminClient(s, p.opts)
			ctx := ctxTimeout(t)
			create(t, s, "m-000", "", 0, 0)
			waitState(t, s, "m-000", pb.MachineState_MACHINE_STATE_IDLE)
			before, err := providerClient(s).Get(ctx, connect.NewRequest(&pb.MachineRef{Id: "m-000"}))
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.MigrateMachine(ctx, connect.NewRequest(&adminv1.MigrateMachineRequest{Id: "m-000"}))
			if err != nil {
				t.Fatal(err)
			}
			r := res.Msg
			if r.GetFromHost() == r.GetToHost() || r.GetMachine().GetHost() != r.GetToHost() || r.GetPlacement() == "" || r.GetTook() == nil {
				t.Fatalf("response %v", r)
			}
			after, err := providerClient(s).Get(ctx, connect.NewRequest(&pb.MachineRef{Id: "m-000"}))
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Replace(before.Msg.GetHost().GetRef(), "/"+r.GetFromHost()+"/", "/"+r.GetToHost()+"/", 1)
			if after.Msg.GetHost().GetRef() != want || after.Msg.GetState() != pb.MachineState_MACHINE_STATE_IDLE {
				t.Fatalf("after: %v, want ref %s", after.Msg, want)
			}
			hist, err := c.GetMachineHistory(ctx, connect.NewRequest(&adminv1.GetMachineHistoryRequest{Id: "m-000"}))
			if err != nil {
				t.Fatal(err)
			}
			tr := hist.Msg.GetTransitions()
			if last := tr[len(tr)-1]; last.GetKind() != "migrate" || !strings.Contains(last.GetNote(), "to host "+r.GetToHost()) {
				t.Fatalf("history %v", last)
			}
			for _, tc := range []struct {
				id, to string
				code   connect.Code
			}{
				{"", "", connect.CodeInvalidArgument},
				{"m-001", "", connect.CodeAborted}, // SPECULATIVE
				{"m-000", "b1", connect.CodeNotFound},
				{"nope", "", connect.CodeNotFound},
			} {
				_, err := c.MigrateMachine(ctx, connect.NewRequest(&adminv1.MigrateMachineRequest{Id: tc.id, ToHost: tc.to}))
				wantCode(t, err, tc.code)
			}
			if n := writes(s, "migrate", "ok"); n != 1 {
				t.Errorf("migrate ok = %d", n)
			}
			if logs := s.Logs.String(); !strings.Contains(logs, "action=migrate") || !strings.Contains(logs, "machine migrated") {
				t.Errorf("not logged:\n%s", logs)
			}
		})
	}
}

func TestMigrateMachineRefusedWithoutAdminWrite(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{Fake: twoHostFake()})
	create(t, s, "m-000", "", 0, 0)
	waitState(t, s, "m-000", pb.MachineState_MACHINE_STATE_IDLE)
	_, err := adminClient(s, nil).MigrateMachine(t.Context(), connect.NewRequest(&adminv1.MigrateMachineRequest{Id: "m-000"}))
	wantCode(t, err, connect.CodePermissionDenied)
	if n := writes(s, "migrate", "denied"); n != 1 {
		t.Errorf("migrate denied = %d", n)
	}
	if vm, _ := s.Fake.VM("m-000"); vm.Placement.Host == "" {
		t.Fatal("no host")
	}
}
