package soakkit

import (
	"strings"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// The causes a Configure cut by a restart may end FAILED with are the
// provider's new ones; the old blanket cause is not one any more.
func TestCutConfigureCauses(t *testing.T) {
	for le, want := range map[string]bool{
		"configure failed: interrupted by a provider restart; its bootstrap hook had exited with status 3":                                                                              true,
		"configure failed: interrupted by a provider restart; its bootstrap hook started, then vanished without an exit status, so nobody can tell whether the node joined its cluster": true,
		"configure interrupted by a provider restart, and the guest could not tell within --configure-timeout (15m0s) whether its bootstrap hook ran: guest agent not responding":       true,
		"configure failed: interrupted by a provider restart, and its domain is gone, so nothing can show whether its bootstrap hook ran: not found":                                    true,
		"configure failed: interrupted by a provider restart; the bootstrap blob is never persisted, so it cannot be delivered again":                                                   false,
		"configure failed: bootstrap hook exited with status 3": false,
	} {
		if got := CutConfigureFailed(le); got != want {
			t.Errorf("CutConfigureFailed(%q) = %v, want %v", le, got, want)
		}
	}
	rolled := "configure rolled back to IDLE: cut by a provider restart before its bootstrap hook started; the cluster binding is cleared"
	idle := pb.MachineState_MACHINE_STATE_IDLE
	if !CutConfigureRolledBack(&pb.Machine{State: idle, LastError: rolled}) {
		t.Error("a rolled-back machine not recognised")
	}
	if CutConfigureRolledBack(&pb.Machine{State: pb.MachineState_MACHINE_STATE_FAILED, LastError: rolled}) ||
		CutConfigureRolledBack(&pb.Machine{State: idle}) {
		t.Error("recognised a machine that was not rolled back")
	}
}

// A Configure that ends IDLE is rolled back (not unaccounted) only with
// the rollback's cause and a provider restart since it was sent.
func TestJudgeRolledBackConfigure(t *testing.T) {
	sent := time.Now().Add(-time.Minute)
	rolled := &pb.Machine{Id: "m", State: pb.MachineState_MACHINE_STATE_IDLE,
		LastError: "configure rolled back to IDLE: cut by a provider restart before its bootstrap hook started; the cluster binding is cleared"}
	for _, c := range []struct {
		name    string
		m       *pb.Machine
		started time.Time
		want    string
	}{
		{"restarted", rolled, sent.Add(time.Second), "rolled-back"},
		{"no restart since", rolled, sent.Add(-time.Second), "unaccounted"},
		{"idle without the cause", &pb.Machine{Id: "m", State: pb.MachineState_MACHINE_STATE_IDLE}, sent.Add(time.Second), "unaccounted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var violations []string
			j := &Judge{Led: NewLedger(), T0: sent,
				Read:      func(string) (*pb.Machine, error) { return c.m, nil },
				LastStart: func() time.Time { return c.started },
				Timeout:   func(string) time.Duration { return time.Minute },
				Violate:   func(class, key, what string, m *pb.Machine) { violations = append(violations, class+": "+what) },
				Logf:      func(string, ...any) {},
			}
			op := &OpRecord{Machine: "m", Kind: "Configure", Target: pb.MachineState_MACHINE_STATE_CONFIGURED, Sent: sent}
			j.Await(op)
			if !strings.HasPrefix(op.Outcome, c.want) {
				t.Errorf("outcome %q, want %s (violations %v)", op.Outcome, c.want, violations)
			}
			if (c.want == "rolled-back") != (len(violations) == 0) {
				t.Errorf("violations %v", violations)
			}
		})
	}
}
