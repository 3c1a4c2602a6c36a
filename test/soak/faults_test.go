//go:build soak

package soak

import (
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// runFaults injects the planned faults in a seeded random order, a random
// gap apart (so they land at random moments of the churn), checks after
// each one, then lets the churn run on until MinDuration has passed.
func (s *soak) runFaults() {
	rng := rand.New(rand.NewPCG(s.p.Seed, 0xfa17))
	var plan []faultKind
	for _, k := range allKinds {
		for range s.p.Faults[k] {
			plan = append(plan, k)
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	span := func(r [2]time.Duration) time.Duration { return r[0] + time.Duration(rng.Int64N(int64(r[1]-r[0])+1)) }
	for i, k := range plan {
		if !s.deadline.IsZero() && time.Until(s.deadline) < 8*time.Minute {
			s.violate(clOther, "budget", fmt.Sprintf("go test -timeout leaves under 8 min: stopped after %d of %d faults", i, len(plan)), nil)
			return
		}
		time.Sleep(span(s.p.Gap))
		aimed := s.aim(k)
		shared := s.led.BeginFault(k, "")
		ev := faultEvent{Kind: k, Start: shared.Start}
		err := s.inject(&ev, shared, rng, span)
		ev.End = time.Now()
		if aimed != "" {
			ev.Note = aimed + ", " + ev.Note
		}
		s.led.EditFault(shared, func(f *faultEvent) {
			f.End, f.Note, f.CutShort = ev.End, ev.Note, ev.CutShort
			if err != nil {
				f.Note += fmt.Sprintf(" (injection failed: %v)", err)
			}
		})
		if err != nil {
			s.violate(clOther, "inject|"+string(k)+"|"+err.Error(), fmt.Sprintf("fault %s: %v", k, err), nil)
			if s.h.ensureLibvirtd() != nil {
				s.logf("libvirtd cannot be brought back: stopping the faults")
				return
			}
			if s.pr.Exited() {
				if err := s.pr.Start(); err != nil {
					s.violate(clOther, "restart", fmt.Sprintf("provider cannot be restarted: %v", err), nil)
					return
				}
			}
			continue
		}
		n := s.nfault.Add(1)
		s.logf("fault %d/%d %s (%s) took %s", i+1, len(plan), k, ev.Note, ev.End.Sub(ev.Start).Round(100*time.Millisecond))
		s.settle()
		s.liveCheck(fmt.Sprintf("after fault %d (%s)", n, k))
	}
	for time.Since(s.t0) < s.p.MinDuration && (s.deadline.IsZero() || time.Until(s.deadline) > 8*time.Minute) {
		time.Sleep(time.Second)
	}
}

// settle waits until the provider serves and libvirtd answers again.
func (s *soak) settle() {
	if err := s.h.waitAnswer(2 * time.Minute); err != nil {
		s.violate(clOther, "settle|libvirtd", err.Error(), nil)
	}
	if _, err := s.list(); err != nil {
		s.violate(clOther, "settle|provider", fmt.Sprintf("provider does not answer after a fault: %v", err), nil)
	}
}

func (s *soak) inject(ev, shared *faultEvent, rng *rand.Rand, span func([2]time.Duration) time.Duration) error {
	switch ev.Kind {
	case provKill:
		s.pr.Kill()
		ev.Note = "restarted on the same state"
		return s.pr.Start()
	case provTerm:
		took, self := s.pr.Term(s.p.ShutdownTimeout + 20*time.Second)
		ev.CutShort = !self || took >= s.p.ShutdownTimeout-500*time.Millisecond
		// Known before the restart, so a Configure that the restart finds
		// interrupted is judged with it.
		s.led.EditFault(shared, func(f *faultEvent) { f.CutShort = ev.CutShort })
		ev.Note = fmt.Sprintf("exited after %s", took.Round(100*time.Millisecond))
		if !self {
			s.violate(clOther, "term|"+ev.Start.String(), fmt.Sprintf("provider ignored SIGTERM for %s", took.Round(time.Second)), nil)
		}
		return s.pr.Start()
	case virtKill:
		pid, err := s.h.killLibvirtd()
		if err != nil {
			return err
		}
		down := span(s.p.Down)
		time.Sleep(down)
		ev.Note = fmt.Sprintf("pid %d, down %s", pid, down.Round(100*time.Millisecond))
		return s.h.startLibvirtd(pid)
	case virtFreeze:
		d := span(s.p.Freeze)
		ev.Note = fmt.Sprintf("SIGSTOP %s", d.Round(100*time.Millisecond))
		return s.h.freeze(d)
	case agentFault:
		return s.agentFault(ev, rng, span)
	case lostState:
		return s.lostState(ev, rng)
	}
	return fmt.Errorf("unknown fault %q", ev.Kind)
}

// agentFault kills or freezes qemu-ga in the guest of a machine that is
// IDLE or CONFIGURED and not in a transition (its client is held off while
// the agent is down). No machine may go FAILED for it, and the next
// Configure or Drain on it must work once the agent is back.
func (s *soak) agentFault(ev *faultEvent, rng *rand.Rand, span func([2]time.Duration) time.Duration) error {
	// Clients hold a machine for a whole operation and pause 0.2–2 s
	// between two: polling often catches those pauses.
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		for _, i := range rng.Perm(len(s.ids)) {
			id := s.ids[i]
			if !s.locks[id].TryLock() {
				continue
			}
			ok, err := s.agentFaultOn(id, ev, rng, span)
			s.locks[id].Unlock()
			if ok || err != nil {
				return err
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no IDLE or CONFIGURED machine with a live guest agent within 90s")
}

func (s *soak) agentFaultOn(id string, ev *faultEvent, rng *rand.Rand, span func([2]time.Duration) time.Duration) (bool, error) {
	m, err := s.get(id)
	st := m.GetState()
	if err != nil || (st != pb.MachineState_MACHINE_STATE_IDLE && st != pb.MachineState_MACHINE_STATE_CONFIGURED) {
		return false, nil
	}
	dom := s.domain[id]
	if s.h.agentPing(dom) != nil {
		return false, nil // still booting: pick another
	}
	// The script runs detached from the agent it stops or kills; the
	// initial sleep lets guest-exec answer first.
	if rng.IntN(2) == 0 {
		ev.Note = fmt.Sprintf("qemu-ga SIGKILLed in %s (%s)", dom, st)
		if err := s.h.guestShell(dom, "sleep 0.3; kill -KILL $(cat /run/qemu-ga.pid)"); err != nil {
			return false, fmt.Errorf("%s: %w", dom, err)
		}
		time.Sleep(300*time.Millisecond + span([2]time.Duration{0, 3 * time.Second}))
	} else {
		d := span(s.p.AgentFreeze)
		ev.Note = fmt.Sprintf("qemu-ga SIGSTOPped %s in %s (%s)", d.Round(100*time.Millisecond), dom, st)
		script := fmt.Sprintf("sleep 0.3; p=$(cat /run/qemu-ga.pid); kill -STOP $p; sleep %.1f; kill -CONT $p", d.Seconds())
		if err := s.h.guestShell(dom, script); err != nil {
			return false, fmt.Errorf("%s: %w", dom, err)
		}
		time.Sleep(300*time.Millisecond + d + 500*time.Millisecond)
	}
	after, err := s.get(id)
	if err == nil && after.GetState() != st {
		s.violate(clOther, "agent|"+id+"|"+ev.Start.String(), fmt.Sprintf("%s went %s → %s while only its guest agent was faulted", id, st, after.GetState()), after)
	}
	return true, nil
}

// lostState is issue 10's item 4 on the real host: with every machine
// stable, stop the provider, delete or empty its --state file, restart, and
// check that every machine came back from domain metadata with its state,
// placement, cluster and shard_metadata.
func (s *soak) lostState(ev *faultEvent, rng *rand.Rand) error {
	s.lockAll()
	defer s.unlockAll()
	s.quiesce("before lost-state")
	s.fullCheck("before lost-state")
	before, err := s.list()
	if err != nil {
		return err
	}
	took, self := s.pr.Term(s.p.ShutdownTimeout + 20*time.Second)
	if !self {
		s.violate(clOther, "term|"+ev.Start.String(), fmt.Sprintf("provider ignored SIGTERM for %s", took.Round(time.Second)), nil)
	}
	how := "deleted"
	if rng.IntN(2) == 0 {
		how = "emptied"
		err = os.Truncate(s.pr.state, 0)
	} else {
		err = os.Remove(s.pr.state)
	}
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := s.pr.Start(); err != nil {
		return err
	}
	back := 0
	for _, id := range s.ids {
		b := before[id]
		m := s.awaitState(id, b.GetState(), 90*time.Second)
		if m.GetState() != b.GetState() {
			s.violate(clBinding, "lost|"+id+"|"+ev.Start.String(),
				fmt.Sprintf("state file %s: %s was %s, came back %s", how, id, b.GetState(), m.GetState()), m)
			continue
		}
		back++
		if m.GetHost().GetRef() != b.GetHost().GetRef() || m.GetCluster() != b.GetCluster() ||
			fmt.Sprint(m.GetShardMetadata()) != fmt.Sprint(b.GetShardMetadata()) || m.GetInstanceType() != b.GetInstanceType() {
			s.violate(clBinding, "rebuilt|"+id+"|"+ev.Start.String(),
				fmt.Sprintf("state file %s: %s rebuilt as host=%s cluster=%q meta=%q, was host=%s cluster=%q meta=%q", how, id,
					m.GetHost().GetRef(), m.GetCluster(), m.GetShardMetadata(), b.GetHost().GetRef(), b.GetCluster(), b.GetShardMetadata()), m)
		}
	}
	ev.Note = fmt.Sprintf("state file %s; %d/%d machines rebuilt in %s", how, back, len(s.ids), time.Since(t0).Round(100*time.Millisecond))
	s.fullCheck("after lost-state")
	return nil
}

// awaitState polls until the machine is in want or within has passed.
func (s *soak) awaitState(id string, want pb.MachineState, within time.Duration) *pb.Machine {
	deadline := time.Now().Add(within)
	for {
		m, err := s.get(id)
		if err == nil && (m.GetState() == want || time.Now().After(deadline)) {
			return m
		}
		if err != nil && time.Now().After(deadline) {
			return &pb.Machine{Id: id}
		}
		time.Sleep(200 * time.Millisecond)
	}
}
