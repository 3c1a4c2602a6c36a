//go:build soak

package soak

import (
	"fmt"
	"strings"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// domainName is the provider's own derivation, so the soak can tell which
// machine a domain it finds on the host belongs to.
func domainName(provider, id string) string { return meta.DomainName(provider, id) }

// liveCheck runs while the clients churn: it judges only the machines it
// can lock (their clients are between operations), so a domain that is
// being created or deleted right now is never mistaken for an orphan.
func (s *soak) liveCheck(when string) {
	// Gather machines for up to 2 s: a client pauses 0.2–2 s between two
	// operations, and a held machine's client waits for the check.
	var held []string
	got := map[string]bool{}
	for t0 := time.Now(); time.Since(t0) < 2*time.Second && len(held) < len(s.ids); time.Sleep(50 * time.Millisecond) {
		for _, id := range s.ids {
			if !got[id] && s.locks[id].TryLock() {
				got[id] = true
				held = append(held, id)
			}
		}
	}
	defer func() {
		for _, id := range held {
			s.locks[id].Unlock()
		}
	}()
	s.hostCheck(when, held, false)
}

// fullCheck judges every machine; the caller holds every lock.
func (s *soak) fullCheck(when string) {
	s.hostCheck(when, s.ids, true)
}

// hostCheck compares the host (virsh) with the provider's records for the
// machines in judge: every bf-<provider>-* domain and volume belongs to a
// record that has a VM, and every IDLE or CONFIGURED record has its
// running domain and its binding.
func (s *soak) hostCheck(when string, judge []string, full bool) {
	doms, err := s.h.domains()
	if err != nil {
		s.logf("check %s: skipped, host not listed: %v", when, err)
		return
	}
	vols, err := s.h.volumes()
	if err != nil {
		s.logf("check %s: skipped, pool not listed: %v", when, err)
		return
	}
	ms, err := s.list()
	if err != nil {
		s.violate(clOther, "list|"+err.Error(), fmt.Sprintf("check %s: List: %v", when, err), nil)
		return
	}
	byDomain := map[string]string{}
	for id, d := range s.domain {
		byDomain[d] = id
	}
	judged := map[string]bool{}
	for _, id := range judge {
		judged[id] = true
	}
	hasVM := func(st pb.MachineState) bool {
		return st == pb.MachineState_MACHINE_STATE_IDLE || st == pb.MachineState_MACHINE_STATE_CONFIGURED ||
			st == pb.MachineState_MACHINE_STATE_FAILED
	}
	orphan := func(name, kind string) {
		d := strings.TrimSuffix(strings.TrimSuffix(name, ".qcow2"), "-seed.iso")
		id, known := byDomain[d]
		switch {
		case !known:
			s.violate(clOrphan, name, fmt.Sprintf("check %s: %s %s belongs to no machine of the provider", when, kind, name), nil)
		case judged[id] && !hasVM(ms[id].GetState()):
			s.violate(clOrphan, name+"|"+ms[id].GetState().String(),
				fmt.Sprintf("check %s: %s %s exists but its machine is %s", when, kind, name, ms[id].GetState()), ms[id])
		}
	}
	for d := range doms {
		orphan(d, "domain")
	}
	for _, v := range vols {
		orphan(v, "volume")
	}
	for _, id := range judge {
		m := ms[id]
		st := m.GetState()
		switch {
		case st == pb.MachineState_MACHINE_STATE_IDLE || st == pb.MachineState_MACHINE_STATE_CONFIGURED:
			if got := doms[s.domain[id]]; got != "running" {
				s.violate(clOrphan, "norun|"+id+"|"+got, fmt.Sprintf("check %s: %s record %s has no running domain (domain %s: %q)",
					when, st, id, s.domain[id], got), m)
			}
			s.checkRecord(m)
		case st == pb.MachineState_MACHINE_STATE_SPECULATIVE:
			s.checkRecord(m)
		case st == pb.MachineState_MACHINE_STATE_FAILED:
			s.judgeFailed(nil, m)
		case full:
			s.violate(clStuck, "quiesced|"+id, fmt.Sprintf("check %s: %s still %s after every operation ended", when, id, st), m)
		}
	}
	s.logf("check %s: %d machines judged, %d domains, %d volumes on the host; violations so far: %d",
		when, len(judge), len(doms), len(vols), len(s.led.Details()))
}

// quiesce brings every machine (all locks held) to a stable, non-FAILED
// state: transitions already in flight end, FAILED machines are judged and
// released.
func (s *soak) quiesce(when string) {
	for pass := 0; pass < 4; pass++ {
		calm := true
		for _, id := range s.ids {
			m, err := s.get(id)
			if err != nil {
				s.violate(clOther, "quiesce|"+err.Error(), fmt.Sprintf("quiesce %s: Get %s: %v", when, id, err), nil)
				return
			}
			switch st := m.GetState(); {
			case soakkit.Transitional(st):
				calm = false
				s.await(&opRecord{Machine: id, Kind: "resumed", Target: soakkit.StableOf(st), Sent: time.Now()})
			case st == pb.MachineState_MACHINE_STATE_FAILED:
				calm = false
				s.judgeFailed(nil, m)
				s.release(id)
			}
		}
		if calm {
			return
		}
	}
}

// teardown returns every machine to SPECULATIVE through the provider (the
// caller holds every lock), checks that this left nothing on the host, and
// stops the provider.
func (s *soak) teardown() {
	for _, id := range s.ids {
		c := s.owner[id]
		for step := 0; step < 6; step++ {
			m, err := s.get(id)
			if err != nil {
				break
			}
			st := m.GetState()
			if st == pb.MachineState_MACHINE_STATE_SPECULATIVE {
				break
			}
			switch {
			case st == pb.MachineState_MACHINE_STATE_IDLE:
				c.run(id, "Delete")
			case st == pb.MachineState_MACHINE_STATE_CONFIGURED:
				c.run(id, "Drain")
			case st == pb.MachineState_MACHINE_STATE_FAILED:
				s.judgeFailed(nil, m)
				s.release(id)
			default:
				s.await(&opRecord{Machine: id, Kind: "resumed", Target: soakkit.StableOf(st), Sent: time.Now()})
			}
		}
	}
	doms, err1 := s.h.domains()
	vols, err2 := s.h.volumes()
	if err1 != nil || err2 != nil {
		s.violate(clOther, "teardown-list", fmt.Sprintf("teardown: cannot list the host: %v %v", err1, err2), nil)
	}
	for d := range doms {
		s.violate(clOrphan, "left|"+d, fmt.Sprintf("teardown: domain %s left after every machine was deleted", d), nil)
	}
	for _, v := range vols {
		s.violate(clOrphan, "left|"+v, fmt.Sprintf("teardown: volume %s left after every machine was deleted", v), nil)
	}
	if took, self := s.pr.Term(s.p.ShutdownTimeout + 20*time.Second); !self {
		s.violate(clOther, "term-end", fmt.Sprintf("provider ignored SIGTERM at the end for %s", took.Round(time.Second)), nil)
	}
}
