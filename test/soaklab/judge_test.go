//go:build soaklab

package soaklab

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

// judge is the shared judgement (soakkit.Judge) with what the lab soak
// alone knows: a machine BigFleet saw CONFIGURED is bound, the real causes
// of a failure, and that an operation a lost state file overlapped may end
// anywhere stable (docs/reliability.md: a mutation whose transition never
// wrote the domain's metadata is lost with the state file).
func (s *soak) judge() *soakkit.Judge {
	return &soakkit.Judge{Led: s.led, T0: s.t0, LastStart: s.lastStart, Timeout: timeoutOf,
		Read:    func(id string) (*pb.Machine, error) { return soakkit.Get(s.admin, id) },
		Violate: s.violate, Logf: s.logf, Explain: s.explain, OnExplained: s.unbind,
		Reached: func(op *soakkit.OpRecord, m *pb.Machine) {
			if m.GetState() == pb.MachineState_MACHINE_STATE_CONFIGURED && op.Kind == "Configure" {
				b, _ := s.led.SentTo(op.Machine)
				s.bind(op.Machine, b)
			}
			s.checkRecord(m)
		},
		// A state file lost since the client last acted on the machine:
		// the provider rebuilt it from the hosts, so what the client
		// believed when it sent op (a Release of a FAILED machine, say, the
		// host still holding its bound domain) may no longer hold.
		Elsewhere: func(op *soakkit.OpRecord, m *pb.Machine) string {
			if len(s.led.FaultsBetween(lostState, s.led.PreviousSent(op.Machine, op.Sent), time.Now())) > 0 {
				return "lost-with-state: " + m.GetState().String()
			}
			return ""
		},
	}
}

func (s *soak) await(op *soakkit.OpRecord) { s.judge().Await(op) }

func (s *soak) judgeFailed(op *soakkit.OpRecord, m *pb.Machine) string {
	return s.judge().Failed(op, m)
}

func timeoutOf(kind string) time.Duration {
	switch kind {
	case "Create":
		return createTimeout
	case "Configure", "resumed":
		return configureTimeout
	case "Drain":
		return drainTimeout
	case "Migrate":
		return migrateTimeout
	}
	return deleteTimeout
}

// explain names the real cause of a failure, or "" if there is none. A
// Configure cut by a provider crash ends as its guest tells (rolled back
// to IDLE or CONFIGURED, judged by soakkit.Judge), or FAILED with a cause
// the guest gave or could not give (soakkit.CutConfigureFailed).
func (s *soak) explain(op *soakkit.OpRecord, m *pb.Machine) string {
	le := m.GetLastError()
	from := time.Now().Add(-10 * time.Minute)
	if op != nil {
		from = op.Sent
	}
	if why := s.crashed(op, m, from); why != "" {
		return why
	}
	_, host, _ := refParts(m)
	if why := s.offExplains(host, le, from); why != "" {
		return why
	}
	configure := op == nil || op.Kind == "Configure"
	if !configure || !soakkit.CutConfigureFailed(le) {
		return ""
	}
	for _, k := range []soakkit.FaultKind{provKill, lostState, provFailover} { // a SIGKILL of the provider (the leader)
		if len(s.led.FaultsBetween(k, from, time.Now())) > 0 {
			return fmt.Sprintf("%s mid-Configure", k)
		}
	}
	for _, f := range s.led.FaultsBetween(provTerm, from, time.Now()) {
		if f.CutShort {
			return "provider SIGTERM outlived --shutdown-timeout mid-Configure"
		}
	}
	return ""
}

// crashed: the machine's host rebooted (every guest on it killed, as a
// hypervisor crash does) while a Configure or Drain ran in the guest, and
// the transition failed because the guest was no longer running. The guest
// died: that is a real cause, unlike a host that was only dark. A Drain
// looks back to the Configure that bound the node: the provider never
// restarts a CONFIGURED machine's guest (BigFleet decides; a Drain cannot
// run its hook in a stopped guest, docs/reliability.md), so a reboot any
// time since then fails it. A Configure of a stopped IDLE guest starts it.
func (s *soak) crashed(op *soakkit.OpRecord, m *pb.Machine, from time.Time) string {
	le := m.GetLastError()
	if op != nil && op.Kind != "Configure" && op.Kind != "Drain" {
		return ""
	}
	if op != nil && op.Kind == "Drain" {
		if bound := s.led.LastReached(op.Client, op.Machine, "Configure"); bound != nil && bound.Ended.Before(from) {
			from = bound.Ended
		}
	}
	if !strings.Contains(le, "is shut off") && !strings.Contains(le, "not running") {
		return ""
	}
	_, host, _ := refParts(m)
	for _, f := range s.led.FaultsBetween(reboot, from, time.Now()) {
		if f.Host == host {
			return "host " + host + " rebooted under the guest"
		}
	}
	return ""
}

// release is the operator's way out of FAILED (admin API): the slot goes
// back to SPECULATIVE through DELETING.
func (s *soak) release(id string) {
	err := soakkit.Retry(func(ctx context.Context) error {
		return s.admin.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/ReleaseMachine",
			&adminv1.ReleaseMachineRequest{Id: id}, &adminv1.ReleaseMachineResponse{})
	})
	if err != nil {
		s.violate(soakkit.ClOther, "release|"+id+"|"+err.Error(), fmt.Sprintf("release %s: %v", id, err), nil)
		return
	}
	s.led.MarkClassified(id, false)
	s.unbind(id)
	s.await(&soakkit.OpRecord{Machine: id, Kind: "Release", Target: pb.MachineState_MACHINE_STATE_SPECULATIVE, Sent: time.Now()})
}

func (s *soak) bind(id string, b soakkit.Binding) {
	s.mu.Lock()
	s.bound[id] = b
	s.mu.Unlock()
}

func (s *soak) unbind(id string) {
	s.mu.Lock()
	delete(s.bound, id)
	s.mu.Unlock()
}

func (s *soak) boundTo(id string) (soakkit.Binding, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.bound[id]
	return b, ok
}

// checkRecord compares a machine with what BigFleet saw and sent: one it
// saw CONFIGURED (and did not drain since) is still CONFIGURED with the
// cluster and shard_metadata of its Configure; a machine with a VM is on a
// host of its zone under the domain name the provider derives; an IDLE or
// SPECULATIVE one carries no binding.
func (s *soak) checkRecord(m *pb.Machine) {
	id, st := m.GetId(), m.GetState()
	if b, ok := s.boundTo(id); ok && st != pb.MachineState_MACHINE_STATE_FAILED {
		if st != pb.MachineState_MACHINE_STATE_CONFIGURED || m.GetCluster() != b.Cluster || !maps.Equal(nonNil(m.GetShardMetadata()), b.Meta) {
			s.violate(soakkit.ClBinding, "binding|"+id+"|"+st.String()+"|"+m.GetCluster(),
				fmt.Sprintf("%s was seen CONFIGURED to %q %q and never drained; now %s %q %q", id, b.Cluster, b.Meta, st, m.GetCluster(), m.GetShardMetadata()), m)
		}
	}
	if st == pb.MachineState_MACHINE_STATE_IDLE || st == pb.MachineState_MACHINE_STATE_CONFIGURED {
		z, h, d := refParts(m)
		if z != s.zone[id] || zones[h] != z || d != s.domain[id] || m.GetHost().GetProvider() != s.p.Provider {
			s.violate(soakkit.ClBinding, "host|"+id+"|"+m.GetHost().GetRef(),
				fmt.Sprintf("%s %s has host %s/%s, want a host of zone %s and domain %s", id, st, m.GetHost().GetProvider(), m.GetHost().GetRef(), s.zone[id], s.domain[id]), m)
		}
	}
	if (st == pb.MachineState_MACHINE_STATE_IDLE || st == pb.MachineState_MACHINE_STATE_SPECULATIVE) &&
		(m.GetCluster() != "" || len(m.GetShardMetadata()) > 0) {
		s.violate(soakkit.ClOther, "stalebinding|"+id+"|"+m.GetCluster(),
			fmt.Sprintf("%s %s still carries cluster %q metadata %q", st, id, m.GetCluster(), m.GetShardMetadata()), m)
	}
}

// refParts splits a machine's zone/host/domain ref.
func refParts(m *pb.Machine) (zone, host, domain string) {
	p := strings.Split(m.GetHost().GetRef(), "/")
	if len(p) != 3 {
		return "", "", ""
	}
	return p[0], p[1], p[2]
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
