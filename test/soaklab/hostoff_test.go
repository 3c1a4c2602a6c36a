//go:build soaklab

package soaklab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// A host off for good (issue 38): powered off (every guest on it killed,
// its address silent), then declared down, either by the operator
// (hostOffAdmin: libvirtctl down through the admin API, a few seconds
// after the power-off) or by the provider's own --fence-command
// (hostOffFenced: the host is only cut off, its guests running, and the
// provider powers it off through the fence command after
// --host-down-after). It stays off for the fault's hold, so the machines
// whose only copy was there go FAILED naming the declaration and the
// shards release them, then it is powered on with its stale domains,
// rejoins fenced (none may start), and the operator ends the declaration.
const (
	hostOffAdmin  soakkit.FaultKind = "host-off-admin"
	hostOffFenced soakkit.FaultKind = "host-off-fenced"
)

// hostDownAfter is the provider's --host-down-after: longer than the short
// run's holds, so there mainly host-off-fenced makes it fence; the long
// run's longer outages can trip it too (any fenced host is brought back
// by settle).
const hostDownAfter = 15 * time.Second

// writeFence writes the provider's fence command: the lab powers the host
// off and the time and host are appended to the soak's record of fences.
func (s *soak) writeFence(dir string) (string, error) {
	s.fenced = filepath.Join(dir, "fenced")
	path := filepath.Join(dir, "fence.sh")
	script := fmt.Sprintf("#!/bin/sh\n# the soak's fence command (--fence-command): an IPMI power-off of the lab host\n"+
		"echo \"$(date +%%s) $2\" >>%s\nexec %s fault \"$2\" poweroff\n", s.fenced, s.lab.Script)
	return path, os.WriteFile(path, []byte(script), 0o755)
}

// hostWithMachine is a host holding one of the soak's machines (IDLE or
// CONFIGURED), so that a host-off fault costs a machine; any host when
// none does.
func (s *soak) hostWithMachine(rng *rand.Rand) string {
	ms, _ := soakkit.List(s.admin)
	var with []string
	for _, id := range s.ids {
		if m := ms[id]; m != nil && (m.GetState() == pb.MachineState_MACHINE_STATE_IDLE || m.GetState() == pb.MachineState_MACHINE_STATE_CONFIGURED) {
			if _, h, _ := refParts(m); h != "" {
				with = append(with, h)
			}
		}
	}
	if len(with) == 0 {
		return s.hosts[rng.IntN(len(s.hosts))].Name
	}
	return with[rng.IntN(len(with))]
}

// fencedBetween: the fence command powered host off between from and to.
func (s *soak) fencedBetween(host string, from, to time.Time) bool {
	b, _ := os.ReadFile(s.fenced)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || f[1] != host {
			continue
		}
		sec, err := strconv.ParseInt(f[0], 10, 64)
		if at := time.Unix(sec, 0); err == nil && !at.Before(from.Add(-time.Second)) && !at.After(to) {
			return true
		}
	}
	return false
}

// hostOff runs one host-off fault to its end: off, declared down, held,
// powered on, rejoined fenced, declared up.
func (s *soak) hostOff(k soakkit.FaultKind, host string, hold time.Duration) (string, error) {
	t0 := time.Now()
	var note string
	if k == hostOffAdmin {
		if _, err := s.lab.run(time.Minute, "fault", host, "poweroff"); err != nil {
			return "poweroff", err
		}
		time.Sleep(3 * time.Second)
		if err := s.declare(host, true, "soak: powered off for good"); err != nil {
			return "powered off; declaration", err
		}
		note = "powered off, declared down by the admin"
	} else {
		if _, err := s.lab.run(time.Minute, "fault", host, "partition"); err != nil {
			return "partition", err
		}
		took, err := s.awaitDown(host, hostDownAfter+2*time.Minute)
		if err != nil {
			return "cut off; waiting for the fence command", err
		}
		note = fmt.Sprintf("cut off, fenced and declared down by the fence command after %s", took.Round(100*time.Millisecond))
	}
	time.Sleep(hold + 2*reconcileEvery)                               // its machines go FAILED; the shards release them
	if _, err := s.lab.run(3*time.Minute, "heal", host); err != nil { // powers it on
		return note, err
	}
	if err := s.rejoin(host); err != nil {
		return note, err
	}
	return fmt.Sprintf("%s; back after %s", note, time.Since(t0).Round(100*time.Millisecond)), nil
}

// rejoin waits until a powered-on host declared down answers and the
// fenced rejoin has removed every stale copy it holds (a domain of a
// machine deleted or living on another host), as the runbook says
// (docs/pools.md: leave it declared down until a pass has listed it and
// its stale copies are gone), then ends the declaration. Stale copies
// still there after 2 min are a violation of the rejoin, not a reason to
// wait forever.
func (s *soak) rejoin(host string) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		h, err := s.hostInfo(host)
		if err == nil && h.GetConnected() {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s declared down did not answer within 3 min of its power-on (%v)", host, err)
		}
		time.Sleep(time.Second)
	}
	time.Sleep(2 * reconcileEvery)
	var stale []string
	for t0 := time.Now(); time.Since(t0) < 2*time.Minute; time.Sleep(reconcileEvery) {
		if stale = s.staleCopies(host); len(stale) == 0 {
			break
		}
	}
	if len(stale) > 0 {
		s.violate(soakkit.ClOrphan, "fenced|"+host+"|"+strings.Join(stale, ","),
			fmt.Sprintf("fenced rejoin of %s: stale copies still there 2 min after it answered: %v", host, stale), nil)
	}
	return s.declare(host, false, "")
}

// staleCopies are the soak's domains on host whose machine was deleted
// (no VM) or lives on another host, or whose machine is between two
// states (judged again at the next look).
func (s *soak) staleCopies(host string) []string {
	l, err := s.lab.list(host, s.prefix())
	if err != nil {
		return []string{"(not listed: " + err.Error() + ")"}
	}
	var stale []string
	for _, id := range s.ids {
		if _, ok := l.doms[s.domain[id]]; !ok {
			continue
		}
		m, err := soakkit.Get(s.admin, id)
		if err != nil {
			stale = append(stale, id+" (unread)")
			continue
		}
		switch st := m.GetState(); st {
		case pb.MachineState_MACHINE_STATE_IDLE, pb.MachineState_MACHINE_STATE_CONFIGURED, pb.MachineState_MACHINE_STATE_FAILED:
			if _, h, _ := refParts(m); h != host {
				stale = append(stale, fmt.Sprintf("%s (%s on %q)", id, st, h))
			}
		case pb.MachineState_MACHINE_STATE_SPECULATIVE:
			stale = append(stale, id+" (deleted)")
		default:
			stale = append(stale, fmt.Sprintf("%s (%s)", id, st))
		}
	}
	return stale
}

// awaitDown waits until host is declared down and says how long it took.
func (s *soak) awaitDown(host string, within time.Duration) (time.Duration, error) {
	t0 := time.Now()
	for {
		h, err := s.hostInfo(host)
		if err == nil && h.GetDown() != nil {
			return time.Since(t0), nil
		}
		if time.Since(t0) > within {
			return time.Since(t0), fmt.Errorf("%s not declared down within %s of its cut (%v)", host, within, err)
		}
		time.Sleep(time.Second)
	}
}

// declare declares host down (with reason) or up through the admin API.
func (s *soak) declare(host string, down bool, reason string) error {
	return soakkit.Retry(func(ctx context.Context) error {
		if down {
			return s.admin.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/DeclareHostDown",
				&adminv1.DeclareHostDownRequest{Host: host, Reason: reason}, &adminv1.DeclareHostDownResponse{})
		}
		return s.admin.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/DeclareHostUp",
			&adminv1.DeclareHostUpRequest{Host: host}, &adminv1.DeclareHostUpResponse{})
	})
}

func (s *soak) hostInfo(host string) (*adminv1.Host, error) {
	var res adminv1.ListHostsResponse
	err := soakkit.Retry(func(ctx context.Context) error {
		return s.admin.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/ListHosts", &adminv1.ListHostsRequest{}, &res)
	})
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(res.GetHosts(), func(x *adminv1.Host) bool { return x.GetName() == host })
	if i < 0 {
		return nil, fmt.Errorf("no host %s in ListHosts", host)
	}
	return res.GetHosts()[i], nil
}

// bringBackFenced brings back every host the fence command declared down
// outside a host-off fault (a long outage of another kind tripped
// --host-down-after): powered on, rejoined fenced, declared up.
func (s *soak) bringBackFenced(when string) {
	for _, h := range s.hosts {
		info, err := s.hostInfo(h.Name)
		if err != nil || info.GetDown() == nil {
			continue
		}
		s.logf("%s: %s declared down (%s by %s): bringing it back", when, h.Name, info.GetDown().GetReason(), info.GetDown().GetBy())
		s.nfenced.Add(1)
		if _, err := s.lab.run(3*time.Minute, "heal", h.Name); err != nil {
			s.violate(soakkit.ClOther, "heal|"+h.Name+"|"+when, fmt.Sprintf("%s: heal %s: %v", when, h.Name, err), nil)
			continue
		}
		if err := s.rejoin(h.Name); err != nil {
			s.violate(soakkit.ClOther, "rejoin|"+h.Name+"|"+when, fmt.Sprintf("%s: %v", when, err), nil)
		}
	}
}

// offExplains: the machine's host (or the host named in its last error)
// was powered off by a host-off fault or the fence command since from, and
// the failure names a declaration or a dead guest. A powered-off host is a
// real cause: its guests are gone.
func (s *soak) offExplains(host, lastErr string, from time.Time) string {
	if !strings.Contains(lastErr, "declared down") && !strings.Contains(lastErr, "is shut off") && !strings.Contains(lastErr, "not running") {
		return ""
	}
	// A declaration holds until it is ended: whatever ran on the host
	// since it was powered off (the last 10 minutes) failed for it.
	now := time.Now()
	if back := now.Add(-10 * time.Minute); back.Before(from) {
		from = back
	}
	for _, hs := range s.hosts {
		named := hs.Name == host || strings.Contains(lastErr, "/"+hs.Name+" ")
		if !named {
			continue
		}
		for _, k := range []soakkit.FaultKind{hostOffAdmin, hostOffFenced} {
			for _, f := range s.led.FaultsBetween(k, from, now) {
				if f.Host == hs.Name {
					return fmt.Sprintf("host %s powered off (%s)", hs.Name, k)
				}
			}
		}
		if s.fencedBetween(hs.Name, from, now) {
			return fmt.Sprintf("host %s powered off by the fence command", hs.Name)
		}
	}
	return ""
}
