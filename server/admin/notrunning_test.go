package admin_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
)

// TestMachinesViewShowsStoppedDomains (issue 15 case 4): what the admin
// page's machines view reads says that a CONFIGURED machine's domain is
// shut off (its last_error, in the table and the detail), and an IDLE
// machine's restart shows in its history timeline.
func TestMachinesViewShowsStoppedDomains(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{Machines: 4})
	create(t, s, "m-000", "", 0, 0)
	create(t, s, "m-001", "", 0, 0)
	waitState(t, s, "m-000", pb.MachineState_MACHINE_STATE_IDLE)
	waitState(t, s, "m-001", pb.MachineState_MACHINE_STATE_IDLE)
	if _, err := providerClient(s).Configure(t.Context(), connect.NewRequest(&pb.ConfigureRequest{
		MachineId: "m-001", ClusterId: "c1", BootstrapBlob: []byte("b")})); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, "m-001", pb.MachineState_MACHINE_STATE_CONFIGURED)
	crashed := backend.RunState{State: backend.RunShutoff, Reason: "crashed"}
	s.Fake.SetRunState("m-000", crashed)
	s.Fake.SetRunState("m-001", crashed)
	time.Sleep(5 * time.Millisecond) // the records must predate the listing
	s.Engine.Reconcile(t.Context())

	c := adminClient(s, nil)
	ctx := ctxTimeout(t)
	sum, err := c.GetFleetSummary(ctx, connect.NewRequest(&adminv1.GetFleetSummaryRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if r := sum.Msg.GetLastReconcile(); r.GetRestarted() != 1 || r.GetNotRunning() != 1 {
		t.Errorf("last reconcile: restarted %d, not running %d; want 1 and 1 (m-000 started again, m-001 left stopped)",
			r.GetRestarted(), r.GetNotRunning())
	}
	res, err := c.ListMachines(ctx, connect.NewRequest(&adminv1.ListMachinesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*adminv1.AdminMachine{}
	for _, m := range res.Msg.GetMachines() {
		got[m.GetMachine().GetId()] = m
	}
	conf := got["m-001"].GetMachine()
	if conf.GetState() != pb.MachineState_MACHINE_STATE_CONFIGURED ||
		!strings.HasPrefix(conf.GetLastError(), "domain bf-m-001 is shut off (crashed) since ") {
		t.Fatalf("CONFIGURED machine in the view: %v %q", conf.GetState(), conf.GetLastError())
	}
	if idle := got["m-000"].GetMachine(); idle.GetState() != pb.MachineState_MACHINE_STATE_IDLE || idle.GetLastError() != "" {
		t.Fatalf("IDLE machine in the view: %v %q", idle.GetState(), idle.GetLastError())
	}
	h, err := c.GetMachineHistory(ctx, connect.NewRequest(&adminv1.GetMachineHistoryRequest{Id: "m-000"}))
	if err != nil {
		t.Fatal(err)
	}
	tr := h.Msg.GetTransitions()
	if last := tr[len(tr)-1]; last.GetKind() != "reconcile" || last.GetOutcome() != "restarted" ||
		last.GetLastError() != "domain bf-m-000 was shut off (crashed); started again by reconcile" {
		t.Fatalf("last transition of the restarted machine: %v", last)
	}
}
