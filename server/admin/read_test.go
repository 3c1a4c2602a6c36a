package admin_test

import (
	"slices"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
)

// TestReadRPCs drives every read-only RPC over each protocol against the
// real engine on the fake backend.
func TestReadRPCs(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			s := admintest.Start(t, admintest.Options{Machines: 6})
			create(t, s, "m-000", "shard-a", 3, 7)
			create(t, s, "m-001", "shard-b", 1, 1)
			waitState(t, s, "m-000", pb.MachineState_MACHINE_STATE_IDLE)
			waitState(t, s, "m-001", pb.MachineState_MACHINE_STATE_IDLE)
			c := adminClient(s, p.opts)
			ctx := ctxTimeout(t)

			t.Run("GetFleetSummary", func(t *testing.T) {
				res, err := c.GetFleetSummary(ctx, connect.NewRequest(&adminv1.GetFleetSummaryRequest{}))
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]int32{}
				for _, c := range res.Msg.GetCounts() {
					got[c.GetZone()+"/"+c.GetState().String()] = c.GetCount()
				}
				want := map[string]int32{
					"zone-a/MACHINE_STATE_IDLE": 1, "zone-a/MACHINE_STATE_SPECULATIVE": 2,
					"zone-b/MACHINE_STATE_IDLE": 1, "zone-b/MACHINE_STATE_SPECULATIVE": 2,
				}
				if res.Msg.GetTotal() != 6 || len(got) != len(want) {
					t.Fatalf("summary = %v (total %d)", got, res.Msg.GetTotal())
				}
				for k, v := range want {
					if got[k] != v {
						t.Errorf("%s = %d, want %d", k, got[k], v)
					}
				}
				if res.Msg.GetAdminWrite() {
					t.Error("admin_write reported on without --admin-write")
				}
				if res.Msg.GetLastReconcile().GetTime() == nil || res.Msg.GetServerTime() == nil {
					t.Errorf("missing times: %v", res.Msg)
				}
			})

			t.Run("ListHosts", func(t *testing.T) {
				res, err := c.ListHosts(ctx, connect.NewRequest(&adminv1.ListHostsRequest{}))
				if err != nil {
					t.Fatal(err)
				}
				hs := res.Msg.GetHosts()
				if len(hs) != 2 || hs[0].GetZone() != "zone-a" || hs[1].GetZone() != "zone-b" {
					t.Fatalf("hosts = %v", hs)
				}
				for _, h := range hs {
					if !h.GetConnected() || h.GetUri() != "fake://"+h.GetZone() || h.GetDomainCount() != 1 ||
						h.GetMachineCount() != 3 || h.GetLibvirtVersion() == "" || h.GetLastReconcileOutcome() != "ok" ||
						h.GetLastReconcileTime() == nil {
						t.Errorf("host = %v", h)
					}
				}
			})

			t.Run("ListMachines", func(t *testing.T) {
				res, err := c.ListMachines(ctx, connect.NewRequest(&adminv1.ListMachinesRequest{}))
				if err != nil {
					t.Fatal(err)
				}
				ms := res.Msg.GetMachines()
				if len(ms) != 6 || res.Msg.GetTotalMatched() != 6 {
					t.Fatalf("got %d machines", len(ms))
				}
				if !slices.IsSortedFunc(ms, func(a, b *adminv1.AdminMachine) int {
					return compare(a.GetMachine().GetId(), b.GetMachine().GetId())
				}) {
					t.Error("machines not ordered by id")
				}
				m := ms[0]
				if m.GetMachine().GetId() != "m-000" || m.GetDomain() != "bf-m-000" || m.GetOperationId() == "" ||
					m.GetOperationKind() != "create" || m.GetStateSince() == nil || m.GetTimeInState() == nil ||
					m.GetRevision() == 0 || m.GetMachine().GetHost().GetRef() != "zone-a/bf-m-000" ||
					m.GetMachine().GetInstanceType() != "small" || m.GetMachine().GetAllocatable().GetResources()["cpu"] != "2" {
					t.Errorf("m-000 = %v", m)
				}
				if m.GetOperationDeadline() != nil {
					t.Error("deadline set on a machine with no transition running")
				}

				res, err = c.ListMachines(ctx, connect.NewRequest(&adminv1.ListMachinesRequest{
					States: []pb.MachineState{pb.MachineState_MACHINE_STATE_SPECULATIVE}, Zones: []string{"zone-b"}}))
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, m := range res.Msg.GetMachines() {
					ids = append(ids, m.GetMachine().GetId())
				}
				if !slices.Equal(ids, []string{"m-003", "m-005"}) {
					t.Errorf("filtered = %v", ids)
				}

				res, err = c.ListMachines(ctx, connect.NewRequest(&adminv1.ListMachinesRequest{MaxResults: 2}))
				if err != nil || len(res.Msg.GetMachines()) != 2 || res.Msg.GetTotalMatched() != 6 {
					t.Errorf("max 2: %v %v", res, err)
				}
				_, err = c.ListMachines(ctx, connect.NewRequest(&adminv1.ListMachinesRequest{MaxResults: -1}))
				wantCode(t, err, connect.CodeInvalidArgument)
			})

			t.Run("GetMachine", func(t *testing.T) {
				res, err := c.GetMachine(ctx, connect.NewRequest(&adminv1.GetMachineRequest{Id: "m-001"}))
				if err != nil {
					t.Fatal(err)
				}
				if res.Msg.GetMachine().GetMachine().GetState() != pb.MachineState_MACHINE_STATE_IDLE {
					t.Errorf("m-001 = %v", res.Msg)
				}
				_, err = c.GetMachine(ctx, connect.NewRequest(&adminv1.GetMachineRequest{Id: "nope"}))
				wantCode(t, err, connect.CodeNotFound)
				_, err = c.GetMachine(ctx, connect.NewRequest(&adminv1.GetMachineRequest{}))
				wantCode(t, err, connect.CodeInvalidArgument)
			})

			t.Run("GetMachineHistory", func(t *testing.T) {
				res, err := c.GetMachineHistory(ctx, connect.NewRequest(&adminv1.GetMachineHistoryRequest{Id: "m-000"}))
				if err != nil {
					t.Fatal(err)
				}
				tr := res.Msg.GetTransitions()
				if res.Msg.GetMachineId() != "m-000" || res.Msg.GetLimit() < 1 || len(tr) != 1 {
					t.Fatalf("history = %v", res.Msg)
				}
				h := tr[0]
				if h.GetKind() != "create" || h.GetFromState() != pb.MachineState_MACHINE_STATE_SPECULATIVE ||
					h.GetToState() != pb.MachineState_MACHINE_STATE_IDLE || h.GetOutcome() != "succeeded" ||
					h.GetStarted() == nil || h.GetEnded() == nil || h.GetDuration() == nil || h.GetOperationId() == "" {
					t.Errorf("transition = %v", h)
				}
				res, err = c.GetMachineHistory(ctx, connect.NewRequest(&adminv1.GetMachineHistoryRequest{Id: "m-005"}))
				if err != nil || len(res.Msg.GetTransitions()) != 0 {
					t.Errorf("untouched machine history: %v %v", res, err)
				}
				_, err = c.GetMachineHistory(ctx, connect.NewRequest(&adminv1.GetMachineHistoryRequest{Id: "nope"}))
				wantCode(t, err, connect.CodeNotFound)
			})

			t.Run("ListFenceMarks", func(t *testing.T) {
				res, err := c.ListFenceMarks(ctx, connect.NewRequest(&adminv1.ListFenceMarksRequest{}))
				if err != nil {
					t.Fatal(err)
				}
				sh := res.Msg.GetShards()
				if len(sh) != 2 || sh[0].GetShardId() != "shard-a" || sh[1].GetShardId() != "shard-b" {
					t.Fatalf("shards = %v", sh)
				}
				if m := sh[0].GetMarks(); len(m) != 1 || m[0].GetMachineId() != "m-000" || m[0].GetEpoch() != 3 || m[0].GetSequence() != 7 {
					t.Errorf("shard-a marks = %v", m)
				}
				res, err = c.ListFenceMarks(ctx, connect.NewRequest(&adminv1.ListFenceMarksRequest{ShardId: "shard-b"}))
				if err != nil || len(res.Msg.GetShards()) != 1 || res.Msg.GetShards()[0].GetMarks()[0].GetMachineId() != "m-001" {
					t.Errorf("shard-b only: %v %v", res, err)
				}
				res, err = c.ListFenceMarks(ctx, connect.NewRequest(&adminv1.ListFenceMarksRequest{MachineId: "m-005"}))
				if err != nil || len(res.Msg.GetShards()) != 0 {
					t.Errorf("no marks for m-005: %v %v", res, err)
				}
			})
		})
	}
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
