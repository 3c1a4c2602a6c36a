//go:build soak

package soak

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// await polls the machine until the operation ends, and files the outcome:
// reached (binding checked), FAILED (judged), another stable state
// (unaccounted), or still transitional past its deadline (stuck). The
// deadline counts from the send or from the provider's last start, whichever
// is later, because a transition resumed after a restart gets a fresh one.
func (s *soak) await(op *opRecord) {
	for {
		m, err := s.get(op.Machine)
		if err != nil {
			s.violate(clOther, "await|"+op.Machine+"|"+err.Error(), fmt.Sprintf("waiting for %s of %s: %v", op.Kind, op.Machine, err), nil)
			s.led.SetOutcome(op, "unreachable")
			return
		}
		st := m.GetState()
		switch {
		case st == op.Target:
			if op.Cluster == "exit3" {
				s.violate(clOther, "exit3ok|"+op.OpID, fmt.Sprintf("Configure of %s to cluster exit3 (hook exits 3) ended CONFIGURED", op.Machine), m)
			}
			s.checkRecord(m)
			s.led.SetOutcome(op, "reached")
			return
		case st == pb.MachineState_MACHINE_STATE_FAILED:
			s.led.SetOutcome(op, s.judgeFailed(op, m))
			return
		case !soakkit.Transitional(st):
			s.violate(clOther, "unaccounted|"+op.Machine+"|"+op.Sent.String(),
				fmt.Sprintf("%s of %s (op %q) ended %s, want %s", op.Kind, op.Machine, op.OpID, st, op.Target), m)
			s.led.SetOutcome(op, "unaccounted")
			return
		}
		base := op.Sent
		if ls := s.pr.LastStart(); ls.After(base) {
			base = ls
		}
		if budget := timeoutOf(op.Kind) + stuckGrace; time.Since(base) > budget {
			s.violate(clStuck, "stuck|"+op.Machine+"|"+op.Sent.String(),
				fmt.Sprintf("%s of %s (op %q) still %s %s after it was sent or resumed (timeout %s + %s grace)",
					op.Kind, op.Machine, op.OpID, st, time.Since(base).Round(time.Second), timeoutOf(op.Kind), stuckGrace), m)
			s.led.SetOutcome(op, "stuck")
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// judgeFailed decides whether a FAILED machine was failed by a cause the
// soak provoked on purpose (and the contract allows), or by a transient
// fault (false_failed). It judges each FAILED state once; op is nil for a
// machine found FAILED between operations (e.g. by reconcile).
func (s *soak) judgeFailed(op *opRecord, m *pb.Machine) string {
	id := m.GetId()
	if s.led.IsClassified(id) {
		return "failed-explained: judged before"
	}
	s.led.MarkClassified(id, true)
	why := s.explain(op, m)
	if why != "" {
		s.logf("%s FAILED as provoked (%s): %s", id, why, m.GetLastError())
		return "failed-explained: " + why
	}
	what := fmt.Sprintf("%s FAILED by a transient fault", id)
	if op != nil {
		what = fmt.Sprintf("%s of %s (op %q, sent at %.1fs) FAILED by a transient fault", op.Kind, id, op.OpID, op.Sent.Sub(s.t0).Seconds())
	}
	s.violate(clFalse, id+"|"+m.GetLastError()+"|"+time.Now().String(), what, m)
	return "false-failed"
}

// explain names the provoked cause of a failure, or "" if there is none.
func (s *soak) explain(op *opRecord, m *pb.Machine) string {
	le := m.GetLastError()
	sent, _ := s.led.SentTo(m.GetId())
	configure := op == nil || op.Kind == "Configure"
	if configure && sent.Cluster == "exit3" && strings.Contains(le, "status 3") {
		return "bootstrap hook of cluster exit3 fails on purpose"
	}
	if configure && strings.Contains(le, "interrupted by a provider restart") {
		from := time.Now().Add(-10 * time.Minute)
		if op != nil {
			from = op.Sent
		}
		// The contract (Restart) lets a Configure cut by a crash end FAILED:
		// the blob is never persisted, so it cannot be delivered again.
		if len(s.led.FaultsBetween(provKill, from, time.Now())) > 0 {
			return "provider SIGKILLed mid-Configure"
		}
		for _, f := range s.led.FaultsBetween(provTerm, from, time.Now()) {
			if f.CutShort {
				return "provider SIGTERM outlived --shutdown-timeout mid-Configure"
			}
		}
	}
	return ""
}

// release is the operator's way out of FAILED (admin API): the slot goes
// back to SPECULATIVE through DELETING.
func (s *soak) release(id string) {
	err := s.retry(func(ctx context.Context) error {
		return s.pr.conn.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/ReleaseMachine",
			&adminv1.ReleaseMachineRequest{Id: id}, &adminv1.ReleaseMachineResponse{})
	})
	if err != nil {
		s.violate(clOther, "release|"+id+"|"+err.Error(), fmt.Sprintf("release %s: %v", id, err), nil)
		return
	}
	s.led.MarkClassified(id, false)
	s.await(&opRecord{Machine: id, Kind: "Release", Target: pb.MachineState_MACHINE_STATE_SPECULATIVE, Sent: time.Now()})
}

// checkRecord compares a stable machine with what its client sent: a
// CONFIGURED machine keeps the cluster and shard_metadata of the last
// Configure, and a machine with a VM keeps the placement the provider
// derives for it.
func (s *soak) checkRecord(m *pb.Machine) {
	id, st := m.GetId(), m.GetState()
	if st == pb.MachineState_MACHINE_STATE_IDLE || st == pb.MachineState_MACHINE_STATE_CONFIGURED {
		want := "local/" + s.domain[id]
		if m.GetHost().GetRef() != want || m.GetHost().GetProvider() != s.p.Provider {
			s.violate(clBinding, "host|"+id+"|"+m.GetHost().GetRef(),
				fmt.Sprintf("%s %s has host %s/%s, want %s/%s", id, st, m.GetHost().GetProvider(), m.GetHost().GetRef(), s.p.Provider, want), m)
		}
	}
	switch st {
	case pb.MachineState_MACHINE_STATE_CONFIGURED:
		b, ok := s.led.SentTo(id)
		if !ok || m.GetCluster() != b.Cluster || !maps.Equal(nonNil(m.GetShardMetadata()), b.Meta) {
			s.violate(clBinding, "binding|"+id+"|"+m.GetCluster()+"|"+fmt.Sprint(m.GetShardMetadata()),
				fmt.Sprintf("CONFIGURED %s is bound to %q %q, its client sent %q %q", id, m.GetCluster(), m.GetShardMetadata(), b.Cluster, b.Meta), m)
		}
	case pb.MachineState_MACHINE_STATE_IDLE, pb.MachineState_MACHINE_STATE_SPECULATIVE:
		if m.GetCluster() != "" || len(m.GetShardMetadata()) > 0 {
			s.violate(clOther, "stalebinding|"+id+"|"+m.GetCluster(),
				fmt.Sprintf("%s %s still carries cluster %q metadata %q", st, id, m.GetCluster(), m.GetShardMetadata()), m)
		}
	}
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
