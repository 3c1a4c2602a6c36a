//go:build soaklab

package soaklab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// The fault kinds: five on a lab host's network or daemon, two on the
// host as a whole (four with the host-off kinds of hostoff_test.go), four
// on the provider (five in the HA run: provider-failover, ha_test.go).
const (
	partition  soakkit.FaultKind = "partition"
	delay      soakkit.FaultKind = "delay"
	loss       soakkit.FaultKind = "loss"
	freeze     soakkit.FaultKind = "freeze"
	killDaemon soakkit.FaultKind = "kill-daemon"
	reboot     soakkit.FaultKind = "reboot"
	rotateCert soakkit.FaultKind = "rotate-client-cert"
	provKill   soakkit.FaultKind = "provider-sigkill"
	provTerm   soakkit.FaultKind = "provider-sigterm"
	lostState  soakkit.FaultKind = "lost-state"
)

// menu is each kind with its weight in the draw.
var menu = []struct {
	kind   soakkit.FaultKind
	weight int
}{
	{partition, 4}, {delay, 2}, {loss, 2}, {freeze, 2}, {killDaemon, 2}, {reboot, 1}, {rotateCert, 1},
	{provKill, 2}, {provTerm, 1}, {lostState, 1},
}

// haMenu is drawn from in the HA run (SOAK_HA=1) only.
var haMenu = []struct {
	kind   soakkit.FaultKind
	weight int
}{{provFailover, 3}}

// hostOffMenu is drawn from in the long run only; the short run injects
// each once, at a fixed burst (forcedAt), to keep its time.
var hostOffMenu = []struct {
	kind   soakkit.FaultKind
	weight int
}{{hostOffAdmin, 1}, {hostOffFenced, 1}}

// forcedAt is the short run's host-off faults, by burst.
var forcedAt = map[int]soakkit.FaultKind{2: hostOffAdmin, 4: hostOffFenced}

func isHostOff(k soakkit.FaultKind) bool { return k == hostOffAdmin || k == hostOffFenced }

func onProvider(k soakkit.FaultKind) bool {
	return k == provKill || k == provTerm || k == lostState || k == provFailover
}

// runBursts injects faults in bursts until the run is done: each burst
// starts one to a few faults a few seconds apart, so they overlap (on
// distinct hosts, at most one on the provider), and every fault heals
// itself after its hold. Once the whole burst has healed, the lab settles
// and the invariants are checked.
func (s *soak) runBursts(t *testing.T) {
	rng := rand.New(rand.NewPCG(s.p.Seed, 0xfa17))
	deadline, _ := t.Deadline()
	for burst := 1; !s.done(); burst++ {
		if !deadline.IsZero() && time.Until(deadline) < 6*time.Minute {
			s.violate(soakkit.ClOther, "budget", fmt.Sprintf("go test -timeout leaves under 6 min: stopped after %d faults", s.nfault.Load()), nil)
			return
		}
		var wg sync.WaitGroup
		var kinds []string
		busy := map[string]bool{}
		provider := false
		n := s.p.Burst[0] + rng.IntN(s.p.Burst[1]-s.p.Burst[0]+1)
		offset := time.Duration(0)
		hostOff := false
		for i := range n {
			k, host := s.draw(rng, busy, provider, hostOff)
			if f, ok := forcedAt[burst]; ok && s.p.Minutes == 0 && i == 0 {
				k, host = f, s.hostWithMachine(rng)
			}
			if k == "" {
				break
			}
			hostOff = hostOff || isHostOff(k)
			busy[host], provider = true, provider || onProvider(k)
			if isHostOff(k) {
				// No second fault on the host's zone or the provider while
				// it is off: a zone with no host at all, or a state file lost
				// while the only record of the host's machines is on the
				// powered-off host, is a double fault the soak does not
				// judge (docs/reliability.md).
				provider = true
				for h, z := range zones {
					if z == zones[host] {
						busy[h] = true
					}
				}
			}
			hold := s.p.Hold[0] + time.Duration(rng.Int64N(int64(s.p.Hold[1]-s.p.Hold[0])+1))
			arg := map[soakkit.FaultKind]int{delay: 100 + rng.IntN(1400), loss: 5 + rng.IntN(36)}[k]
			if k == lostState && rng.IntN(2) == 0 {
				arg = 1 // stop the provider with SIGTERM rather than SIGKILL
			}
			kinds = append(kinds, fmt.Sprintf("%s %s", k, host))
			at := offset
			wg.Go(func() { time.Sleep(at); s.fault(k, host, hold, arg) })
			offset += time.Duration(rng.Int64N(int64(4 * time.Second)))
		}
		wg.Wait()
		s.settle(fmt.Sprintf("burst %d", burst))
		s.check(fmt.Sprintf("after burst %d (%v)", burst, kinds), false)
	}
}

// done: the short run ends after MinFaults faults, the long one after
// SOAK_MINUTES.
func (s *soak) done() bool {
	if s.p.Minutes > 0 {
		return time.Since(s.t0) >= time.Duration(s.p.Minutes)*time.Minute
	}
	return s.nfault.Load() >= int64(s.p.MinFaults)
}

// draw picks a kind by weight and a host for it among those not busy in
// this burst ("" for the provider); the second provider fault or host-off
// fault of a burst is drawn again.
func (s *soak) draw(rng *rand.Rand, busy map[string]bool, provider, hostOff bool) (soakkit.FaultKind, string) {
	kinds := menu
	if s.p.HA {
		kinds = append(slices.Clone(kinds), haMenu...)
	}
	if s.p.Minutes > 0 {
		kinds = append(slices.Clone(kinds), hostOffMenu...)
	}
	total := 0
	for _, m := range kinds {
		total += m.weight
	}
	for range 20 {
		r := rng.IntN(total)
		var k soakkit.FaultKind
		for _, m := range kinds {
			if r -= m.weight; r < 0 {
				k = m.kind
				break
			}
		}
		if isHostOff(k) && hostOff {
			continue // one host off at a time
		}
		if onProvider(k) {
			if provider {
				continue
			}
			return k, ""
		}
		var free []string
		for _, h := range s.hosts {
			tls := h.Labels["transport"] == "tls"
			if !busy[h.Name] && (k != rotateCert || tls) {
				free = append(free, h.Name)
			}
		}
		if len(free) > 0 {
			return k, free[rng.IntN(len(free))]
		}
	}
	return "", ""
}

// fault injects one fault, holds it, heals it, and records it.
func (s *soak) fault(k soakkit.FaultKind, host string, hold time.Duration, arg int) {
	ev := s.led.BeginFault(k, host)
	note, err := s.inject(k, host, hold, arg, ev)
	s.led.EditFault(ev, func(f *soakkit.FaultEvent) {
		f.End, f.Note = time.Now(), note
		if err != nil {
			f.Note += fmt.Sprintf(" (injection failed: %v)", err)
		}
	})
	if err != nil {
		s.violate(soakkit.ClOther, "inject|"+string(k)+"|"+err.Error(), fmt.Sprintf("fault %s %s: %v", k, host, err), nil)
		for _, pr := range s.procs {
			if onProvider(k) && pr.Exited() {
				if err := pr.Start(); err != nil {
					s.violate(soakkit.ClOther, "restart", fmt.Sprintf("provider cannot be restarted: %v", err), nil)
				}
			}
		}
		return
	}
	n := s.nfault.Add(1)
	s.logf("fault %d: %s %s (%s) took %s", n, k, host, note, time.Since(ev.Start).Round(100*time.Millisecond))
}

func (s *soak) inject(k soakkit.FaultKind, host string, hold time.Duration, arg int, ev *soakkit.FaultEvent) (string, error) {
	switch k {
	case partition, freeze:
		return s.hostFault(host, hold, string(k))
	case delay, loss:
		return s.hostFault(host, hold, string(k), fmt.Sprint(arg))
	case killDaemon:
		return s.hostFault(host, min(hold, 10*time.Second), string(k))
	case hostOffAdmin, hostOffFenced:
		return s.hostOff(k, host, hold)
	case reboot, rotateCert:
		_, err := s.lab.run(3*time.Minute, "fault", host, string(k))
		return string(k), err
	case provFailover:
		return s.failover()
	case provKill, provTerm, lostState:
		i, pr, err := s.leaderProc()
		if err != nil {
			return "", err
		}
		note, err := s.onLeader(k, pr, s.states[i], arg, ev)
		if err == nil {
			err = s.afterProviderFault()
		}
		if s.p.HA {
			note = s.names[i] + " (the leader): " + note
		}
		return note, err
	}
	return "", fmt.Errorf("unknown fault %q", k)
}

// onLeader is a fault on the provider (the leader in the HA run): pr and
// its --state.
func (s *soak) onLeader(k soakkit.FaultKind, pr *soakkit.Proc, state string, arg int, ev *soakkit.FaultEvent) (string, error) {
	switch k {
	case provKill:
		pr.Kill()
		s.markRestart()
		return "restarted on the same state", pr.Start()
	case provTerm:
		took, self := pr.Term(s.p.ShutdownTimeout + 20*time.Second)
		cut := !self || took >= s.p.ShutdownTimeout-500*time.Millisecond
		// Known before the restart, so a Configure that the restart finds
		// interrupted is judged with it.
		s.led.EditFault(ev, func(f *soakkit.FaultEvent) { f.CutShort = cut })
		if !self {
			s.violate(soakkit.ClOther, "term|"+ev.Start.String(), fmt.Sprintf("provider ignored SIGTERM for %s", took.Round(time.Second)), nil)
		}
		s.markRestart()
		return fmt.Sprintf("exited after %s", took.Round(100*time.Millisecond)), pr.Start()
	default: // lostState
		how := "SIGKILL"
		if arg == 1 {
			how = "SIGTERM"
			pr.Term(s.p.ShutdownTimeout + 20*time.Second)
		} else {
			pr.Kill()
		}
		s.markRestart()
		// A replica sets its state file aside at every start (it starts
		// as a standby), so in the HA run there may be none to lose.
		if err := os.Remove(state); err != nil && !(s.p.HA && errors.Is(err, os.ErrNotExist)) {
			return how, err
		}
		return how + ", state file deleted, restarted", pr.Start()
	}
}

// hostFault holds a fault of the lab's on the host, then heals it.
func (s *soak) hostFault(host string, hold time.Duration, args ...string) (string, error) {
	note := fmt.Sprintf("%v for %s", args, hold.Round(100*time.Millisecond))
	if _, err := s.lab.run(time.Minute, append([]string{"fault", host}, args...)...); err != nil {
		return note, err
	}
	time.Sleep(hold)
	_, err := s.lab.run(2*time.Minute, "heal", host)
	return note, err
}

// markRestart asks for every machine's fence marks to be probed at the
// next check: a restart must lose none.
func (s *soak) markRestart() {
	s.mu.Lock()
	for _, id := range s.ids {
		s.probe[id] = true
	}
	s.mu.Unlock()
}

// settle brings back the hosts the fence command powered off, waits until
// the provider serves and reaches every host again (a rebooted host's
// libvirtd, a rotated certificate), then lets reconcile run two passes.
func (s *soak) settle(when string) {
	deadline := time.Now().Add(3 * time.Minute)
	var dark []string
	for {
		// A fence command may fire for a host still dark from the burst
		// (its outage passed --host-down-after), even during the wait.
		s.bringBackFenced(when)
		dark = s.darkHosts()
		if len(dark) == 0 {
			time.Sleep(2 * reconcileEvery)
			if !s.anyDown() {
				return
			}
			continue
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	s.violate(soakkit.ClOther, "settle|"+when, fmt.Sprintf("settle %s: hosts %v still not connected after 3 min of calm", when, dark), nil)
	time.Sleep(2 * reconcileEvery)
}

// anyDown: some host of the soak is declared down (one ListHosts).
func (s *soak) anyDown() bool {
	var res adminv1.ListHostsResponse
	err := soakkit.Retry(func(ctx context.Context) error {
		return s.admin.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/ListHosts", &adminv1.ListHostsRequest{}, &res)
	})
	return err == nil && slices.ContainsFunc(res.GetHosts(), func(h *adminv1.Host) bool { return h.GetDown() != nil })
}

// darkHosts are the soak's hosts the provider does not report connected.
func (s *soak) darkHosts() []string {
	var res adminv1.ListHostsResponse
	err := soakkit.Retry(func(ctx context.Context) error {
		return s.admin.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/ListHosts", &adminv1.ListHostsRequest{}, &res)
	})
	var dark []string
	for _, h := range s.hosts {
		i := slices.IndexFunc(res.GetHosts(), func(x *adminv1.Host) bool { return x.GetName() == h.Name })
		if err != nil || i < 0 || !res.GetHosts()[i].GetConnected() {
			dark = append(dark, h.Name)
		}
	}
	return dark
}
