//go:build soaklab

package soaklab

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// finding is one invariant broken at one look.
type finding struct {
	class, what string
	m           *pb.Machine
}

// check judges the machines it holds against what every host holds
// (virsh inside the host). With all, the caller holds every lock;
// otherwise it takes the locks it can within 3 s (their clients are
// between operations), so a domain being created, deleted or migrated
// right now is never judged. A running copy too many counts at once;
// orphans and books get two reconcile passes to converge first.
func (s *soak) check(when string, all bool) {
	held := s.ids
	if !all {
		// Clients start no new operation while the check gathers machines
		// (up to 6 s): those whose operation ends meanwhile are judged.
		s.holding.Store(true)
		held = s.tryLock(6 * time.Second)
		defer func() {
			s.holding.Store(false)
			for _, id := range held {
				s.locks[id].Unlock()
			}
		}()
	}
	first := s.inspect(when, held, all)
	for key, f := range first {
		if f.class == clRunning {
			s.violate(f.class, key, f.what, f.m)
			delete(first, key)
		}
	}
	if len(first) > 0 {
		time.Sleep(3 * reconcileEvery)
		for key, f := range s.inspect(when, held, all) {
			if _, ok := first[key]; ok {
				s.violate(f.class, key, f.what, f.m)
			}
		}
	}
	s.probeMarks(held)
	s.logf("check %s: %d/%d machines judged; violations so far: %d", when, len(held), len(s.ids), len(s.led.Details()))
}

func (s *soak) tryLock(within time.Duration) []string {
	var held []string
	got := map[string]bool{}
	for t0 := time.Now(); time.Since(t0) < within && len(held) < len(s.ids); time.Sleep(50 * time.Millisecond) {
		for _, id := range s.ids {
			if !got[id] && s.locks[id].TryLock() {
				got[id] = true
				held = append(held, id)
			}
		}
	}
	return held
}

// inspect lists every host and the provider's records and returns what is
// wrong, keyed so that a lasting problem counts once.
func (s *soak) inspect(when string, held []string, all bool) map[string]finding {
	out := map[string]finding{}
	add := func(class, key, what string, m *pb.Machine) {
		out[class+"|"+key] = finding{class, fmt.Sprintf("check %s: %s", when, what), m}
	}
	hosts := map[string]listing{}
	for _, h := range s.hosts {
		l, err := s.lab.list(h.Name, s.prefix())
		if err != nil {
			s.logf("check %s: %s not listed: %v", when, h.Name, err)
			if all {
				s.violate(soakkit.ClOther, "list|"+when+"|"+h.Name, fmt.Sprintf("check %s: %s not listed: %v", when, h.Name, err), nil)
			}
			continue
		}
		hosts[h.Name] = l
	}
	ms := map[string]*pb.Machine{}
	for _, id := range held {
		m, err := soakkit.Get(s.admin, id)
		if err != nil {
			s.violate(soakkit.ClOther, "get|"+err.Error(), fmt.Sprintf("check %s: Get %s: %v", when, id, err), nil)
			return out
		}
		ms[id] = m
		s.checkRecord(m)
		if m.GetState() == pb.MachineState_MACHINE_STATE_FAILED {
			s.judgeFailed(nil, m)
		}
	}
	s.runningCopies(hosts, ms, add)
	s.orphans(hosts, ms, add)
	s.books(hosts, ms, add, all && len(hosts) == len(s.hosts))
	return out
}

// runningCopies: at most one running copy of a machine over every host.
// It judges every machine, held or not, but one whose live migration is
// under way (both copies exist then, and libvirt pauses one).
func (s *soak) runningCopies(hosts map[string]listing, ms map[string]*pb.Machine, add func(string, string, string, *pb.Machine)) {
	for _, id := range s.ids {
		m := ms[id]
		s.mu.Lock()
		moving := s.migrating[id]
		s.mu.Unlock()
		if moving {
			continue
		}
		var on []string
		for h, l := range hosts {
			if l.doms[s.domain[id]] == "running" {
				on = append(on, h)
			}
		}
		// A machine not held may have been deleted on one host and created
		// on another between the two listings: its copies count only if
		// they run at the same instant (asked of the hosts at once).
		if len(on) > 1 && (m != nil || s.runningNow(s.domain[id], on)) {
			slices.Sort(on)
			add(clRunning, id+"|"+strings.Join(on, ","), fmt.Sprintf("%s runs on %v at once", id, on), m)
		}
	}
}

// runningNow asks the hosts at once whether dom runs on each.
func (s *soak) runningNow(dom string, hosts []string) bool {
	var wg sync.WaitGroup
	var n atomic.Int32
	for _, h := range hosts {
		wg.Go(func() {
			if out, err := s.lab.virsh(h, "domstate", dom); err == nil && out == "running" {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return int(n.Load()) == len(hosts)
}

// orphans: every domain and volume of the provider on a host belongs to a
// machine with a VM whose record names that host.
func (s *soak) orphans(hosts map[string]listing, ms map[string]*pb.Machine, add func(string, string, string, *pb.Machine)) {
	byDomain := map[string]string{}
	for id, d := range s.domain {
		byDomain[d] = id
	}
	judge := func(host, name, kind string) {
		d := strings.TrimSuffix(strings.TrimSuffix(name, ".qcow2"), "-seed.iso")
		id, known := byDomain[d]
		m, held := ms[id]
		_, recorded, _ := refParts(m)
		switch {
		case !known:
			add(soakkit.ClOrphan, host+"|"+name, fmt.Sprintf("%s %s on %s belongs to no machine of the provider", kind, name, host), nil)
		case held && (!soakkit.HasVM(m.GetState()) || recorded != host):
			add(soakkit.ClOrphan, host+"|"+name+"|"+m.GetState().String()+"|"+recorded,
				fmt.Sprintf("%s %s on %s, but its machine is %s on %q", kind, name, host, m.GetState(), recorded), m)
		}
	}
	for h, l := range hosts {
		for d := range l.doms {
			judge(h, d, "domain")
		}
		for _, v := range l.vols {
			judge(h, v, "volume")
		}
	}
}

// books: the provider's view of each host's domains equals what the host
// holds: an IDLE or CONFIGURED record's domain runs on the host it names,
// and (when every machine is held) each host's capacity counts exactly the
// domains it holds.
func (s *soak) books(hosts map[string]listing, ms map[string]*pb.Machine, add func(string, string, string, *pb.Machine), counts bool) {
	for id, m := range ms {
		st := m.GetState()
		if st != pb.MachineState_MACHINE_STATE_IDLE && st != pb.MachineState_MACHINE_STATE_CONFIGURED {
			continue
		}
		_, h, _ := refParts(m)
		if l, ok := hosts[h]; ok && l.doms[s.domain[id]] != "running" {
			add(clBooks, "norun|"+id+"|"+h+"|"+l.doms[s.domain[id]],
				fmt.Sprintf("%s record %s names %s, where its domain is %q", st, id, h, l.doms[s.domain[id]]), m)
		}
	}
	if !counts {
		return
	}
	var res adminv1.ListHostsResponse
	if err := soakkit.Retry(func(ctx context.Context) error {
		return s.admin.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/ListHosts", &adminv1.ListHostsRequest{}, &res)
	}); err != nil {
		s.violate(soakkit.ClOther, "listhosts|"+err.Error(), fmt.Sprintf("ListHosts: %v", err), nil)
		return
	}
	for _, h := range res.GetHosts() {
		l, ok := hosts[h.GetName()]
		if !ok {
			continue
		}
		if got, want := int(h.GetCapacity().GetMachines()), len(l.doms); got != want {
			add(clBooks, "count|"+h.GetName()+"|"+fmt.Sprint(got, want),
				fmt.Sprintf("the provider books %d machines on %s, which holds %d domains %v", got, h.GetName(), want, slices.Sorted(maps.Keys(l.doms))), nil)
		}
	}
}

// probeMarks sends, after a provider restart, each held machine's owner's
// last accepted token again (a Create: its state does not matter, the fence
// comes first): it must be refused as stale (FailedPrecondition). The
// probed token is that of the last Create, Configure or Drain that reached
// its target, whose transition wrote the mark into the domain's metadata,
// so it survives a lost state file too.
func (s *soak) probeMarks(held []string) {
	for _, id := range held {
		s.mu.Lock()
		due := s.probe[id]
		s.mu.Unlock()
		if !due {
			continue
		}
		m, err := soakkit.Get(s.admin, id)
		if err != nil || (m.GetState() != pb.MachineState_MACHINE_STATE_IDLE && m.GetState() != pb.MachineState_MACHINE_STATE_CONFIGURED) {
			continue // no VM, no mark to keep; or asked again at the next check
		}
		c := s.owner[id]
		last := s.led.LastReached(c.id, id, "Create", "Configure", "Drain")
		if last == nil || last.Seq == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = c.conn.Invoke(ctx, soakkit.MethodPrefix+"Create",
			&pb.CreateRequest{MachineId: id, ShardId: c.id, ShardEpoch: last.Epoch, SequenceNumber: last.Seq}, &pb.TransitionAck{})
		cancel()
		switch status.Code(err) {
		case codes.FailedPrecondition:
			s.refused.Add(1)
			s.mu.Lock()
			delete(s.probe, id)
			s.mu.Unlock()
		case codes.Unavailable, codes.DeadlineExceeded:
			// a zone not listed yet: probed at the next check
		default:
			s.violate(clMarks, id+"|"+fmt.Sprint(last.Seq), fmt.Sprintf("after a provider restart, %s's stale token (epoch %d, seq %d, of its %s %s) on %s got %v, want FailedPrecondition",
				c.id, last.Epoch, last.Seq, last.Kind, last.OpID, id, err), m)
		}
	}
}

// quiesce brings every machine (all locks held) to a stable, non-FAILED
// state: transitions in flight end, FAILED machines are judged and released.
func (s *soak) quiesce(when string) {
	for range 4 {
		calm := true
		for _, id := range s.ids {
			m, err := soakkit.Get(s.admin, id)
			if err != nil {
				s.violate(soakkit.ClOther, "quiesce|"+err.Error(), fmt.Sprintf("quiesce %s: Get %s: %v", when, id, err), nil)
				return
			}
			switch st := m.GetState(); {
			case soakkit.Transitional(st):
				calm = false
				s.await(&soakkit.OpRecord{Machine: id, Kind: "resumed", Target: soakkit.StableOf(st), Sent: time.Now()})
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
// caller holds every lock), checks that this left nothing on any host, and
// stops the provider.
func (s *soak) teardown() {
	for _, id := range s.ids {
		c := s.owner[id]
		for range 6 {
			m, err := soakkit.Get(s.admin, id)
			if err != nil || m.GetState() == pb.MachineState_MACHINE_STATE_SPECULATIVE {
				break
			}
			switch st := m.GetState(); {
			case st == pb.MachineState_MACHINE_STATE_IDLE:
				c.run(id, "Delete")
			case st == pb.MachineState_MACHINE_STATE_CONFIGURED:
				c.run(id, "Drain")
			case st == pb.MachineState_MACHINE_STATE_FAILED:
				s.judgeFailed(nil, m)
				s.release(id)
			default:
				s.await(&soakkit.OpRecord{Machine: id, Kind: "resumed", Target: soakkit.StableOf(st), Sent: time.Now()})
			}
		}
	}
	for _, h := range s.hosts {
		l, err := s.lab.list(h.Name, s.prefix())
		if err != nil {
			s.violate(soakkit.ClOther, "teardown|"+h.Name, fmt.Sprintf("teardown: cannot list %s: %v", h.Name, err), nil)
		}
		for _, x := range append(slices.Sorted(maps.Keys(l.doms)), l.vols...) {
			s.violate(soakkit.ClOrphan, "left|"+h.Name+"|"+x, fmt.Sprintf("teardown: %s left on %s after every machine was deleted", x, h.Name), nil)
		}
	}
	s.stopAll()
}
