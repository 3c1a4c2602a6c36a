//go:build integration && pool

package integration

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// TestPoolZone drives one zone of two real hosts sized so that one
// machine fits on each: Creates spread across both, a third Create finds
// the zone full, each host serves Configure and Drain with a working guest
// agent, and with the second daemon stopped the zone keeps serving on the
// first while the stopped host's machine is not FAILED and a Delete on the
// first stays DELETING until the stopped host can be swept for a copy.
func TestPoolZone(t *testing.T) {
	pe := loadPoolEnv(t)
	// CPU overcommit 1.5/vCPUs: 1.5 placeable vCPUs per host, so one
	// 1-vCPU machine fits and a second does not.
	oc := &overcommit{CPU: 1.5 / float64(nodeCPUs(t, pe)), Memory: 1}
	p := startPool(t, pe, "it-pool", pe.poolHosts(oc), 4)
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	ids := p.slots(t, 4)

	where := p.createAll(t, ctx, pe, ids[0], ids[1])
	t.Run("spread", func(t *testing.T) {
		if where[ids[0]][0] == where[ids[1]][0] {
			t.Fatalf("both Creates went to host %s, want one on each", where[ids[0]][0])
		}
		for id, hd := range where {
			other := sysHost
			if hd[0] == sysHost {
				other = otherHost
			}
			if !onHost(t, pe, hd[0], hd[1]) || onHost(t, pe, other, hd[1]) {
				t.Errorf("%s: domain %s is not (only) on host %s", id, hd[1], hd[0])
			}
		}
	})

	t.Run("full zone", func(t *testing.T) {
		t0 := time.Now()
		var ack pb.TransitionAck
		if err := p.call(ctx, "Create", &pb.CreateRequest{MachineId: ids[2]}, &ack); err != nil {
			t.Fatalf("Create: %v", err)
		}
		m := p.awaitAny(t, ctx, ids[2], pb.MachineState_MACHINE_STATE_FAILED, pb.MachineState_MACHINE_STATE_IDLE)
		took := time.Since(t0)
		t.Logf("TIMING Create in a full zone → %s: %s; last_error: %s", m.GetState(), took.Round(time.Millisecond), m.GetLastError())
		if m.GetState() != pb.MachineState_MACHINE_STATE_FAILED {
			t.Fatalf("Create in a full zone: %s on %q, want FAILED", m.GetState(), m.GetHost().GetRef())
		}
		if took > 5*time.Second {
			t.Errorf("FAILED after %s, want quickly (no libvirt work)", took)
		}
		msg := m.GetLastError()
		// The zone, the request (1 vCPU, 256 MiB) and a host's free capacity.
		for _, want := range []string{poolZone, "256", "free"} {
			if !strings.Contains(msg, want) {
				t.Errorf("last_error %q does not mention %q", msg, want)
			}
		}
		if !strings.Contains(msg, sysHost) && !strings.Contains(msg, otherHost) {
			t.Errorf("last_error %q names no host", msg)
		}
	})

	t.Run("cycle on each host", func(t *testing.T) {
		blob := bytes.Repeat([]byte{0, 'p', 0xfe}, 4000)
		p.sendAll(t, ctx, "Configure", func(id string) proto.Message {
			return &pb.ConfigureRequest{MachineId: id, ClusterId: "c-pool", BootstrapBlob: blob}
		}, ids[0], ids[1])
		for _, id := range ids[:2] {
			p.await(t, ctx, id, pb.MachineState_MACHINE_STATE_CONFIGURED)
			hd := where[id]
			if got := agentCat(t, pe.uri(hd[0]), hd[1], "/run/bigfleet/blob.sha256"); got != sha(blob) {
				t.Errorf("%s on %s: blob sha256 in the guest %q, want %q", id, hd[0], got, sha(blob))
			}
		}
		p.sendAll(t, ctx, "Drain", func(id string) proto.Message {
			return &pb.DrainRequest{MachineId: id, GracePeriodSeconds: 1}
		}, ids[0], ids[1])
		for _, id := range ids[:2] {
			p.await(t, ctx, id, pb.MachineState_MACHINE_STATE_IDLE)
		}
	})

	t.Run("second daemon stopped", func(t *testing.T) {
		var onSys, onOther string
		for id, hd := range where {
			if hd[0] == sysHost {
				onSys = id
			} else {
				onOther = id
			}
		}
		secondHost(t, pe, "stop-daemon")
		restarted := false
		t.Cleanup(func() {
			if !restarted {
				secondHost(t, pe, "start-daemon")
			}
		})
		p.awaitHost(t, otherHost, false)
		// Issue 38 case 4: the stopped host may hold a copy of onSys (a
		// crash or a cut migration can leave one), but it no longer holds
		// the Delete up (every Delete of the zone used to end FAILED at
		// --delete-timeout): the Delete completes with a WARN naming the
		// host, and a copy there would be the Delete's leftover, removed
		// once the host is listed again.
		var ack pb.TransitionAck
		must(t, p.call(ctx, "Delete", &pb.DeleteRequest{MachineId: onSys}, &ack))
		p.awaitLog(t, ctx, fmt.Sprintf(`machine=%s `, onSys), "another host of the zone is unreachable")
		p.awaitAny(t, ctx, onSys, pb.MachineState_MACHINE_STATE_SPECULATIVE)
		// Its capacity on the system host is free at once: the zone
		// serves there.
		m := p.transition(t, ctx, "Create", &pb.CreateRequest{MachineId: ids[3]}, pb.MachineState_MACHINE_STATE_IDLE)
		h, d := placed(t, m)
		t.Cleanup(func() { cleanupDomain(t, env{URI: pe.uri(h), Pool: pe.Pool}, d) })
		if h != sysHost || !onHost(t, pe, sysHost, d) {
			t.Fatalf("Create with %s down went to %s (%s)", otherHost, h, d)
		}
		// Through several reconcile passes (1 s) the stopped host's machine
		// keeps its state and its placement.
		for range 10 {
			if m := p.get(t, onOther); m.GetState() != pb.MachineState_MACHINE_STATE_IDLE || !strings.Contains(m.GetHost().GetRef(), "/"+otherHost+"/") {
				t.Fatalf("%s on the stopped host: %s %q, last_error %q", onOther, m.GetState(), m.GetHost().GetRef(), m.GetLastError())
			}
			time.Sleep(500 * time.Millisecond)
		}
		if m := p.get(t, onSys); m.GetState() != pb.MachineState_MACHINE_STATE_SPECULATIVE {
			t.Fatalf("%s with %s still down: %s, want SPECULATIVE (last_error %q)", onSys, otherHost, m.GetState(), m.GetLastError())
		}
		secondHost(t, pe, "start-daemon")
		restarted = true
		p.awaitHost(t, otherHost, true)
		p.awaitAny(t, ctx, onSys, pb.MachineState_MACHINE_STATE_SPECULATIVE)
		for _, id := range []string{onOther, ids[3]} {
			p.transition(t, ctx, "Delete", &pb.DeleteRequest{MachineId: id}, pb.MachineState_MACHINE_STATE_SPECULATIVE)
		}
		for id, hd := range map[string][2]string{onOther: where[onOther], ids[3]: {h, d}} {
			if onHost(t, pe, hd[0], hd[1]) {
				t.Errorf("%s: domain %s still on %s after Delete", id, hd[1], hd[0])
			}
		}
	})
}

// TestPoolCordon: a host cordoned in the hosts file gets nothing; then,
// through the admin API, the other host is cordoned and this one uncordoned,
// and the next Create goes to it although the other has room.
func TestPoolCordon(t *testing.T) {
	pe := loadPoolEnv(t)
	p := startPool(t, pe, "it-poolc", pe.poolHosts(nil, otherHost), 3)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if h := p.host(t, otherHost); !h.GetCordoned() {
		t.Fatalf("host %s from a hosts file with cordoned: true: %+v", otherHost, h)
	}
	ids := p.slots(t, 3)
	where := p.createAll(t, ctx, pe, ids[0], ids[1])
	for id, hd := range where {
		if hd[0] != sysHost {
			t.Errorf("%s went to cordoned host %s", id, hd[0])
		}
	}
	if ours := ourDomains(t, pe.uri(otherHost), "bf-it-poolc-"); len(ours) > 0 {
		t.Errorf("cordoned host %s has domains %v", otherHost, ours)
	}

	t.Run("admin cordon", func(t *testing.T) {
		p.transition(t, ctx, "Delete", &pb.DeleteRequest{MachineId: ids[0]}, pb.MachineState_MACHINE_STATE_SPECULATIVE)
		p.adminCall(t, "CordonHost", &adminv1.CordonHostRequest{Host: sysHost, Reason: "it: pool cordon"}, &adminv1.CordonHostResponse{})
		p.adminCall(t, "UncordonHost", &adminv1.UncordonHostRequest{Host: otherHost}, &adminv1.UncordonHostResponse{})
		if !p.host(t, sysHost).GetCordoned() || p.host(t, otherHost).GetCordoned() {
			t.Fatalf("after cordon/uncordon: %s cordoned=%v, %s cordoned=%v", sysHost,
				p.host(t, sysHost).GetCordoned(), otherHost, p.host(t, otherHost).GetCordoned())
		}
		m := p.transition(t, ctx, "Create", &pb.CreateRequest{MachineId: ids[2]}, pb.MachineState_MACHINE_STATE_IDLE)
		h, d := placed(t, m)
		t.Cleanup(func() { cleanupDomain(t, env{URI: pe.uri(h), Pool: pe.Pool}, d) })
		if h != otherHost || !onHost(t, pe, otherHost, d) {
			t.Fatalf("Create with %s cordoned went to %s (%s)", sysHost, h, d)
		}
		// The cordoned host's machine stays where it is.
		if m := p.get(t, ids[1]); m.GetState() != pb.MachineState_MACHINE_STATE_IDLE || !onHost(t, pe, sysHost, where[ids[1]][1]) {
			t.Errorf("%s on the cordoned host: %s %q", ids[1], m.GetState(), m.GetHost().GetRef())
		}
	})
	for _, id := range []string{ids[1], ids[2]} {
		if p.get(t, id).GetState() == pb.MachineState_MACHINE_STATE_IDLE {
			p.transition(t, ctx, "Delete", &pb.DeleteRequest{MachineId: id}, pb.MachineState_MACHINE_STATE_SPECULATIVE)
		}
	}
}

// nodeCPUs is the system host's CPU count (`virsh nodeinfo`); both daemons
// run on this machine and report the same.
func nodeCPUs(t *testing.T, pe poolEnv) int {
	t.Helper()
	for _, line := range strings.Split(virsh(t, pe.env, "nodeinfo"), "\n") {
		if v, ok := strings.CutPrefix(line, "CPU(s):"); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
				return n
			}
		}
	}
	t.Fatal("virsh nodeinfo: no CPU(s) line")
	return 0
}

// ourDomains lists the domains on a host whose names start with prefix.
func ourDomains(t *testing.T, uri, prefix string) []string {
	t.Helper()
	var out []string
	for _, d := range strings.Fields(virsh(t, env{URI: uri}, "list", "--all", "--name")) {
		if strings.HasPrefix(d, prefix) {
			out = append(out, d)
		}
	}
	return out
}

// agentCat reads a file in the guest through that host's daemon.
func agentCat(t *testing.T, uri, domain, path string) string {
	t.Helper()
	return agentCatVia(t, func(args ...string) string { return virsh(t, env{URI: uri}, args...) }, domain, path)
}
