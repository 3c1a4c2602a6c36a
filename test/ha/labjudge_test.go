//go:build ha

package ha

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// The rules every operation, binding, fence mark and host is judged by
// after a failover (docs/ha.md, "Tests").

// await waits for op's end on the new leader and judges it by the issue's
// rules: it finishes, or a cut Configure rolls back to IDLE, or it is
// FAILED with a cause; a migration leaves the machine in its state, on one
// host. Never transitional past its timeout + labGrace after the takeover.
func (r *labRig) await(k int, op *labOp, killedAt time.Time) {
	lm := op.m
	if op.kind == "Migrate" {
		select {
		case err := <-op.call:
			op.answer = err
			if err != nil && !op.cut {
				r.t.Logf("kill %d: Migrate %s → %s answered %v", k, lm.id, op.to, err)
			}
		case <-time.After(labTimeouts["Migrate"] + labGrace):
			r.violate(k, "MigrateMachine %s → %s unanswered %s after the kill", lm.id, op.to, labTimeouts["Migrate"]+labGrace)
		}
	}
	deadline := later(op.sent, killedAt).Add(labTimeouts[op.kind] + labGrace)
	var m *pb.Machine
	for {
		var res pb.Machine
		err := r.invoke(r.leader, method+"Get", &pb.MachineRef{Id: lm.id}, &res)
		if err == nil && !soakkit.Transitional(res.GetState()) {
			m = &res
			break
		}
		if time.Now().After(deadline) {
			r.violate(k, "%s of %s (op %q, cut %v) stuck: %s %s after it was sent or taken over (bound: timeout %s + %s)",
				op.kind, lm.id, op.opID, op.cut, res.GetState(), time.Since(later(op.sent, killedAt)).Round(time.Second), labTimeouts[op.kind], labGrace)
			op.out = "stuck"
			r.count(op)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	op.out = r.judge(k, op, m)
	r.count(op)
}

func (r *labRig) count(op *labOp) {
	cut := "uncut"
	if op.cut {
		cut = "cut"
	}
	r.outcomes[op.kind+" "+cut+" "+op.out]++
}

func (r *labRig) judge(k int, op *labOp, m *pb.Machine) string {
	lm, st := op.m, m.GetState()
	if st == stFailed && m.GetLastError() == "" {
		r.violate(k, "%s of %s: FAILED with no cause in last_error", op.kind, lm.id)
	}
	switch {
	case op.kind == "Migrate":
		if st != op.from {
			r.violate(k, "Migrate of %s (cut %v) changed its state %s → %s (%s); a migration never does", lm.id, op.cut, op.from, st, m.GetLastError())
			return "state changed"
		}
		if refHost(m) == op.to {
			return "moved"
		}
		return "stayed"
	case st == op.target:
		if op.kind == "Configure" {
			if m.GetCluster() != op.bind.Cluster || !maps.Equal(m.GetShardMetadata(), op.bind.Meta) {
				r.violate(k, "Configure of %s ended CONFIGURED with cluster %q metadata %v, want %q %v", lm.id, m.GetCluster(), m.GetShardMetadata(), op.bind.Cluster, op.bind.Meta)
			}
			b := op.bind
			lm.bind, lm.configured = &b, true
		}
		if op.kind == "Create" || lm.born == "" {
			lm.born = refHost(m)
		}
		return "reached"
	case st == stFailed:
		if op.kind == "Configure" && op.cut && !soakkit.CutConfigureFailed(m.GetLastError()) {
			r.violate(k, "cut Configure of %s FAILED with %q: not a cause the guest gives (its hook failed, or cannot tell)", lm.id, m.GetLastError())
		}
		r.t.Logf("kill %d: %s of %s (cut %v) FAILED: %s", k, op.kind, lm.id, op.cut, m.GetLastError())
		return "FAILED with cause"
	case op.kind == "Configure" && op.cut && st == stIdle:
		if !soakkit.CutConfigureRolledBack(m) {
			r.violate(k, "cut Configure of %s (op %q) back at IDLE with no rollback cause (last_error %q): an accepted Configure lost",
				lm.id, op.opID, m.GetLastError())
			return "lost (IDLE, no cause)"
		}
		return "rolled back"
	}
	r.violate(k, "%s of %s acknowledged by the old leader (op %q, cut %v) ended %s (%q); want %s or FAILED with a cause: an accepted operation lost",
		op.kind, lm.id, op.opID, op.cut, st, m.GetLastError(), op.target)
	return "lost (" + strings.TrimPrefix(st.String(), "MACHINE_STATE_") + ")"
}

// checkBindings: every machine BigFleet saw CONFIGURED and has not
// drained since is still CONFIGURED in the same cluster, with the same
// shard metadata, after the failover.
func (r *labRig) checkBindings(k int, ops []*labOp) {
	ms, err := r.machines(r.leader)
	if err != nil {
		r.violate(k, "List after the failover: %v", err)
		return
	}
	for _, lm := range r.ms {
		if lm.bind == nil {
			continue
		}
		m := ms[lm.id]
		if m.GetState() != stConfigured || m.GetCluster() != lm.bind.Cluster || !maps.Equal(m.GetShardMetadata(), lm.bind.Meta) {
			r.violate(k, "lost binding: %s was CONFIGURED in %q %v and is %s in %q %v (%s)", lm.id, lm.bind.Cluster, lm.bind.Meta,
				m.GetState(), m.GetCluster(), m.GetShardMetadata(), m.GetLastError())
		}
	}
}

// checkFences runs the conformance fencing checks against the new leader
// for every machine the test has sent a token for: the last accepted
// token again is stale (FailedPrecondition, before any idempotent
// short-circuit); a newer token replaying an operation that reached its
// target is accepted and answered with the same operation id the old
// leader gave; on a FAILED machine a newer token passes the fence and is
// Aborted (a mutation on FAILED). Marks of machines without a domain are
// checked as well as the others (the rule).
func (r *labRig) checkFences(k int) {
	ms, err := r.machines(r.leader)
	if err != nil {
		r.violate(k, "List for the fence checks: %v", err)
		return
	}
	for _, lm := range r.ms {
		op := lm.last
		if op == nil {
			continue
		}
		m := ms[lm.id]
		var ack pb.TransitionAck
		err := r.invoke(r.leader, method+op.kind, op.build(lm.tok), &ack)
		if status.Code(err) != codes.FailedPrecondition {
			r.violate(k, "stale token (%s, 1, %d) replaying %s on %s (%s, has a domain: %v) answered %v (op %q); want FailedPrecondition: the fence mark did not hold across the failover",
				labShard, lm.tok, op.kind, lm.id, m.GetState(), soakkit.HasVM(m.GetState()), err, ack.GetOperationId())
		}
		switch {
		case m.GetState() == op.target && op.out == "reached":
			seq := r.draws.Next()
			ack.Reset()
			err := r.invoke(r.leader, method+op.kind, op.build(seq), &ack)
			if err != nil || ack.GetOperationId() != op.opID {
				r.violate(k, "replay of %s on %s (%s) with a newer token answered %v, op %q; want OK with the old leader's op %q",
					op.kind, lm.id, m.GetState(), err, ack.GetOperationId(), op.opID)
			}
			if status.Code(err) != codes.FailedPrecondition {
				lm.tok = seq
			}
		case m.GetState() == stFailed:
			seq := r.draws.Next()
			err := r.invoke(r.leader, method+op.kind, op.build(seq), &ack)
			if status.Code(err) != codes.Aborted {
				r.violate(k, "newer token on FAILED %s (%s) answered %v; want Aborted (past the fence)", lm.id, op.kind, err)
			}
			if status.Code(err) != codes.FailedPrecondition {
				lm.tok = seq
			}
		}
	}
}

// hostDomains is each lab host's own list of the test's domains (virsh
// as root inside the host): domain → state.
func (r *labRig) hostDomains() (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, h := range labZoneHosts {
		ctx, cancel := context.WithTimeout(r.t.Context(), 30*time.Second)
		raw, err := exec.CommandContext(ctx, r.env.Script, "exec", h, "virsh", "-q", "-c", "qemu:///system", "list", "--all").CombinedOutput()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("virsh list on %s: %v: %s", h, err, raw)
		}
		out[h] = map[string]string{}
		for _, line := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && strings.HasPrefix(f[1], meta.NamePrefix(labName)) {
				out[h][f[1]] = strings.Join(f[2:], " ")
			}
		}
	}
	return out, nil
}

// hostProblems compares the hosts with the leader's books: one domain per
// machine that has a VM, on the host its ref names and running; none for
// a free slot; no domain of no machine. twice lists the machines running
// on both hosts at once (never allowed, not even for a moment).
func (r *labRig) hostProblems() (problems, twice []string, err error) {
	hd, err := r.hostDomains()
	if err != nil {
		return nil, nil, err
	}
	ms, err := r.machines(r.leader)
	if err != nil {
		return nil, nil, err
	}
	known := map[string]bool{}
	for _, lm := range r.ms {
		known[lm.dom] = true
		m := ms[lm.id]
		var on, running []string
		for _, h := range labZoneHosts {
			if st, ok := hd[h][lm.dom]; ok {
				on = append(on, h+"("+st+")")
				if st == "running" {
					running = append(running, h)
				}
			}
		}
		if len(running) > 1 {
			twice = append(twice, fmt.Sprintf("%s runs on %v at once", lm.id, running))
		}
		switch st := m.GetState(); {
		case len(on) > 1:
			problems = append(problems, fmt.Sprintf("%s (%s) has a domain on two hosts: %v", lm.id, st, on))
		case st == stSpec && len(on) > 0:
			problems = append(problems, fmt.Sprintf("free slot %s has a domain: %v", lm.id, on))
		case (st == stIdle || st == stConfigured) && (len(running) != 1 || running[0] != refHost(m)):
			problems = append(problems, fmt.Sprintf("%s is %s on %q by the books; the hosts hold %v", lm.id, st, refHost(m), on))
		}
	}
	for h, doms := range hd {
		for d := range doms {
			if !known[d] {
				problems = append(problems, fmt.Sprintf("%s holds %s, no machine's domain", h, d))
			}
		}
	}
	return problems, twice, nil
}

// checkHosts: no machine runs twice at any look; the books and the hosts
// agree within labSettle.
func (r *labRig) checkHosts(k int) {
	deadline := time.Now().Add(labSettle)
	for {
		problems, twice, err := r.hostProblems()
		for _, s := range twice {
			r.violate(k, "duplicate: %s", s)
		}
		if err == nil && len(problems) == 0 {
			return
		}
		if time.Now().After(deadline) {
			if err != nil {
				r.violate(k, "hosts not listed: %v", err)
			}
			for _, p := range problems {
				r.violate(k, "hosts vs books after %s: %s", labSettle, p)
			}
			return
		}
		time.Sleep(2 * time.Second)
	}
}
