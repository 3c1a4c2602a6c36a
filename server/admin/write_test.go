package admin_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
)

// TestWritesRefusedWithoutAdminWrite: both write actions answer
// PermissionDenied on every protocol, change nothing, and are logged and
// counted as denied.
func TestWritesRefusedWithoutAdminWrite(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{})
	failMachine(t, s, "m-000")
	for _, p := range protocols {
		c := adminClient(s, p.opts)
		_, err := c.ReleaseMachine(t.Context(), connect.NewRequest(&adminv1.ReleaseMachineRequest{Id: "m-000"}))
		wantCode(t, err, connect.CodePermissionDenied)
		if !strings.Contains(connect.NewError(0, err).Message(), "--admin-write") {
			t.Errorf("%s: message %q does not say how to enable writes", p.name, err)
		}
		_, err = c.TriggerReconcile(t.Context(), connect.NewRequest(&adminv1.TriggerReconcileRequest{}))
		wantCode(t, err, connect.CodePermissionDenied)
	}
	waitState(t, s, "m-000", pb.MachineState_MACHINE_STATE_FAILED)
	if n := writes(s, "release", "denied"); n != 3 {
		t.Errorf("release denied = %d, want 3", n)
	}
	if n := writes(s, "reconcile", "denied"); n != 3 {
		t.Errorf("reconcile denied = %d, want 3", n)
	}
	if n := writes(s, "release", "ok"); n != 0 {
		t.Errorf("release ok = %d", n)
	}
	logs := s.Logs.String()
	if !strings.Contains(logs, "admin write refused") || !strings.Contains(logs, "machine=m-000") {
		t.Errorf("refusal not logged:\n%s", logs)
	}
}

// TestReleaseMachine: with --admin-write a FAILED machine goes back to
// SPECULATIVE with its VM gone; anything else is refused with Aborted, an
// unknown id with NotFound, and every attempt is logged and counted.
func TestReleaseMachine(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			s := admintest.Start(t, admintest.Options{AdminWrite: true})
			c := adminClient(s, p.opts)
			ctx := ctxTimeout(t)

			sum, err := c.GetFleetSummary(ctx, connect.NewRequest(&adminv1.GetFleetSummaryRequest{}))
			if err != nil || !sum.Msg.GetAdminWrite() {
				t.Fatalf("admin_write not reported: %v %v", sum, err)
			}

			// A VM that vanished leaves a FAILED record with a host to clean.
			create(t, s, "m-001", "", 0, 0)
			waitState(t, s, "m-001", pb.MachineState_MACHINE_STATE_IDLE)
			s.Fake.Vanish("m-001")
			rec, err := c.TriggerReconcile(ctx, connect.NewRequest(&adminv1.TriggerReconcileRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			if r := rec.Msg.GetReconcile(); r.GetVanished() != 1 || len(r.GetZones()) != 2 || r.GetTime() == nil {
				t.Errorf("reconcile = %v", r)
			}
			waitState(t, s, "m-001", pb.MachineState_MACHINE_STATE_FAILED)

			res, err := c.ReleaseMachine(ctx, connect.NewRequest(&adminv1.ReleaseMachineRequest{Id: "m-001"}))
			if err != nil {
				t.Fatal(err)
			}
			if res.Msg.GetOperationId() == "" || res.Msg.GetMachine().GetMachine().GetState() != pb.MachineState_MACHINE_STATE_DELETING ||
				res.Msg.GetMachine().GetOperationKind() != "release" {
				t.Errorf("release ack = %v", res.Msg)
			}
			waitState(t, s, "m-001", pb.MachineState_MACHINE_STATE_SPECULATIVE)
			if _, ok := s.Fake.VM("m-001"); ok {
				t.Error("VM still exists after release")
			}
			m, _ := s.Engine.Get(ctx, "m-001")
			if m.Host.Ref != "" || m.LastError != "" {
				t.Errorf("released machine = %+v", m)
			}

			_, err = c.ReleaseMachine(ctx, connect.NewRequest(&adminv1.ReleaseMachineRequest{Id: "m-002"}))
			wantCode(t, err, connect.CodeAborted)
			_, err = c.ReleaseMachine(ctx, connect.NewRequest(&adminv1.ReleaseMachineRequest{Id: "nope"}))
			wantCode(t, err, connect.CodeNotFound)
			_, err = c.ReleaseMachine(ctx, connect.NewRequest(&adminv1.ReleaseMachineRequest{}))
			wantCode(t, err, connect.CodeInvalidArgument)

			if n := writes(s, "release", "ok"); n != 1 {
				t.Errorf("release ok = %d", n)
			}
			if n := writes(s, "release", "error"); n != 3 {
				t.Errorf("release error = %d", n)
			}
			if n := writesBy(s, "release", "ok", admintest.TestCaller); n != 1 {
				t.Errorf("release ok by %s = %d", admintest.TestCaller, n)
			}
			if n := writes(s, "reconcile", "ok"); n != 1 {
				t.Errorf("reconcile ok = %d", n)
			}
			logs := s.Logs.String()
			if !strings.Contains(logs, "admin write") || !strings.Contains(logs, "action=release machine=m-001 op=op-") ||
				!strings.Contains(logs, "identity="+admintest.TestCaller) {
				t.Errorf("release not logged:\n%s", logs)
			}
		})
	}
}

// TestWhoAmI: the page's header comes from here. Without a verified
// certificate a caller is anonymous and read-only, saying why; a caller
// the allow-list names may write.
func TestWhoAmI(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts     admintest.Options
		identity string
		may      bool
		reason   string
	}{
		{admintest.Options{}, "anonymous", false, "--admin-write"},
		{admintest.Options{AdminWrite: true, Clients: "ops.corp.io"}, "anonymous", false, "--admin-clients"},
		{admintest.Options{AdminWrite: true}, admintest.TestCaller, true, ""},
	} {
		s := admintest.Start(t, tc.opts)
		for _, p := range protocols {
			res, err := adminClient(s, p.opts).WhoAmI(t.Context(), connect.NewRequest(&adminv1.WhoAmIRequest{}))
			if err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
			m := res.Msg
			if m.GetIdentity() != tc.identity || m.GetMayWrite() != tc.may || m.GetAnonymous() != (tc.identity == "anonymous") ||
				!strings.Contains(m.GetReason(), tc.reason) || (tc.may && m.GetReason() != "") {
				t.Errorf("%+v over %s: WhoAmI = %v", tc.opts, p.name, m)
			}
			if tc.may {
				continue
			}
			// What WhoAmI says is what a write gets.
			_, err = adminClient(s, p.opts).TriggerReconcile(t.Context(), connect.NewRequest(&adminv1.TriggerReconcileRequest{}))
			wantCode(t, err, connect.CodePermissionDenied)
			if err != nil && !strings.Contains(err.Error(), m.GetReason()) {
				t.Errorf("refusal %q does not give WhoAmI's reason %q", err, m.GetReason())
			}
		}
	}
}
