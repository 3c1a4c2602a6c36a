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

// judge is the shared judgement (soakkit.Judge: reached, FAILED, another
// stable state, stuck) with what the local soak alone knows: the provoked
// causes of a failure, and that cluster exit3's hook must fail.
func (s *soak) judge() *soakkit.Judge {
	return &soakkit.Judge{Led: s.led, T0: s.t0, Read: s.get, LastStart: s.pr.LastStart, Timeout: timeoutOf,
		Violate: s.violate, Logf: s.logf, Explain: s.explain,
		Reached: func(op *opRecord, m *pb.Machine) {
			if op.Cluster == "exit3" {
				s.violate(clOther, "exit3ok|"+op.OpID, fmt.Sprintf("Configure of %s to cluster exit3 (hook exits 3) ended CONFIGURED", op.Machine), m)
			}
			s.checkRecord(m)
		},
	}
}

func (s *soak) await(op *opRecord) { s.judge().Await(op) }

func (s *soak) judgeFailed(op *opRecord, m *pb.Machine) string { return s.judge().Failed(op, m) }

// explain names the provoked cause of a failure, or "" if there is none.
func (s *soak) explain(op *opRecord, m *pb.Machine) string {
	le := m.GetLastError()
	sent, _ := s.led.SentTo(m.GetId())
	configure := op == nil || op.Kind == "Configure"
	if configure && sent.Cluster == "exit3" && strings.Contains(le, "status 3") {
		return "bootstrap hook of cluster exit3 fails on purpose"
	}
	if configure && soakkit.CutConfigureFailed(le) {
		from := time.Now().Add(-10 * time.Minute)
		if op != nil {
			from = op.Sent
		}
		// A Configure cut by a crash ends as its guest tells: rolled back
		// to IDLE or CONFIGURED (judged elsewhere), or FAILED with a cause
		// the guest gave or could not give (soakkit.CutConfigureFailed);
		// never with the old blanket cause.
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
