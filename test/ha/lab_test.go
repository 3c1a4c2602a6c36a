//go:build ha

package ha

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// round is one kill: every settled machine gets its next operation, the
// leader is SIGKILLed at a seeded random point of one of them (of the kind
// cut least so far), the standby must serve within the bound, the killed
// process comes back as the standby, and then every operation, fence mark,
// binding and the hosts' own domain lists are judged.
type round struct {
	k        int
	primary  *labOp
	delay    time.Duration
	failover time.Duration
	from, to string
	ops      []*labOp
	viol     int
}

func (r *labRig) round(k int) round {
	t := r.t
	rd := round{k: k}
	standby := other(r.leader, r.a, r.b)
	if !waitReady(standby, r.leader, 30*time.Second) {
		r.violate(k, "leader %s not ready (/readyz %q) or standby %s not naming it (%v) 30 s after the last failover",
			r.leader.name, readyz(r.leader), standby.name, func() error { _, err := standby.list(t.Context()); return err }())
	}
	checkStandby(t, standby, r.leader)
	kind, chosen := r.primary(k)
	before := r.settled(k)
	for _, lm := range r.ms {
		op := r.nextOp(lm, before[lm.id])
		if lm == chosen {
			op = r.opOf(lm, before[lm.id], kind)
		}
		if op == nil {
			continue
		}
		if err := r.send(op); err != nil {
			r.violate(k, "%s of %s (%s) refused by the settled leader: %v", op.kind, lm.id, op.from, err)
			continue
		}
		rd.ops = append(rd.ops, op)
		if lm == chosen {
			rd.primary = op
		}
	}
	if rd.primary == nil {
		t.Fatalf("kill %d: the %s of %s was refused: nothing to cut", k, kind, chosen.id)
	}
	rd.delay = r.draws.Between(0, r.est[rd.primary.kind])
	r.watchUntil(rd.ops, rd.primary.sent.Add(rd.delay), false)
	r.markCut(rd.ops)
	old := r.leader
	rd.from, rd.to = old.name, standby.name
	killedAt := time.Now()
	_ = old.cmd.Process.Signal(syscall.SIGKILL)
	<-old.done
	got, _ := waitLeader(t, 2*labTiming.bound(), standby)
	rd.failover = time.Since(killedAt)
	if got != standby {
		t.Fatalf("kill %d: %s served, not the standby", k, got.name)
	}
	if rd.failover > labTiming.bound() {
		r.violate(k, "standby served %s after the kill; want within lease + 2×retry + 1s = %s", rd.failover.Round(time.Millisecond), labTiming.bound())
	}
	r.leader = standby
	old.start(t) // back, as the standby
	n0 := r.nviol
	for _, op := range rd.ops {
		r.await(k, op, killedAt)
	}
	r.checkBindings(k, rd.ops)
	r.checkFences(k)
	r.checkHosts(k)
	rd.viol = r.nviol - n0
	return rd
}

// warm runs rounds without a kill (at most 5) until each kind's duration
// on these hosts has been measured once, so that the kills' draws span
// each operation whole (a migration here copies the whole disk: the hosts'
// golden images differ).
func (r *labRig) warm(t *testing.T) {
	seen := map[string]bool{}
	for w := 0; w < 5 && len(seen) < 5; w++ {
		before := r.settled(0)
		var ops []*labOp
		for _, lm := range r.ms {
			if op := r.nextOp(lm, before[lm.id]); op != nil {
				if err := r.send(op); err != nil {
					t.Fatalf("warm-up: %s of %s: %v", op.kind, lm.id, err)
				}
				ops = append(ops, op)
			}
		}
		r.watchUntil(ops, time.Now().Add(labTimeouts["Create"]), true)
		for _, op := range ops {
			if !op.done.IsZero() && op.kind != "Release" {
				r.est[op.kind], seen[op.kind] = op.done.Sub(op.sent), true
			}
			r.await(0, op, time.Now())
		}
		r.checkHosts(0)
	}
	t.Logf("warm-up: durations measured %v", r.est)
}

// settled waits (bounded) until no machine is transitional and returns
// them.
func (r *labRig) settled(k int) map[string]*pb.Machine {
	deadline := time.Now().Add(labTimeouts["Create"] + labGrace)
	for {
		ms, err := r.machines(r.leader)
		if err == nil && !slices.ContainsFunc(slices.Collect(maps.Values(ms)), func(m *pb.Machine) bool { return soakkit.Transitional(m.GetState()) }) {
			return ms
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("kill %d: machines not settled within %s: %v %v", k, labTimeouts["Create"]+labGrace, ms, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// watchUntil polls the leader until the kill's time (or, with all, until
// every op ended), noting when each operation ends (for the duration
// estimates).
func (r *labRig) watchUntil(ops []*labOp, until time.Time, all bool) {
	for time.Now().Before(until) {
		if all && !slices.ContainsFunc(ops, func(op *labOp) bool { return op.done.IsZero() }) {
			return
		}
		ms, err := r.machines(r.leader)
		now := time.Now()
		for _, op := range ops {
			if !op.done.IsZero() {
				continue
			}
			if op.kind == "Migrate" {
				select {
				case err := <-op.call:
					op.call <- err // for await
					op.done = now
				default:
				}
				continue
			}
			if m := ms[op.m.id]; err == nil && m != nil && !soakkit.Transitional(m.GetState()) {
				op.done = now
			}
		}
		time.Sleep(min(100*time.Millisecond, time.Until(until)))
	}
}

// markCut: an op is cut when it had not ended at the kill.
func (r *labRig) markCut(ops []*labOp) {
	for _, op := range ops {
		if op.done.IsZero() && op.kind != "Release" {
			op.cut = true
			r.cuts[op.kind]++
		}
		if !op.done.IsZero() && op.kind != "Release" {
			// Learn how long this kind takes, for the next draws.
			r.est[op.kind] = (r.est[op.kind] + op.done.Sub(op.sent)) / 2
		}
	}
}

// TestLabFailover (make test-ha-lab): HA_LAB_KILLS SIGKILLs of the leader
// (20 by default) at seeded random points of Create, Configure, Drain,
// Delete and Migrate on the lab's hosts, each judged by round; prints a
// line per kill and the figures, kept in out/test-ha-lab.txt.
func TestLabFailover(t *testing.T) {
	t0 := time.Now()
	kills := 20
	if n, err := strconv.Atoi(os.Getenv("HA_LAB_KILLS")); err == nil && n > 0 {
		kills = n
	}
	r := newLabRig(t, "lab-failover")
	var lines []string
	var times []time.Duration
	logLine := func(s string) {
		t.Log(s)
		lines = append(lines, s)
	}
	logLine(fmt.Sprintf("seed %d, %s, %d kills, zone %v, %d machines", r.seed, labTiming.name, kills, labZoneHosts, labSlots))
	r.warm(t)
	for k := 1; k <= kills; k++ {
		rd := r.round(k)
		times = append(times, rd.failover)
		var ops []string
		for _, op := range rd.ops {
			mark := ""
			if op.cut {
				mark = "*"
			}
			ops = append(ops, fmt.Sprintf("%s%s %s→%s", op.kind, mark, op.m.id, op.out))
		}
		logLine(fmt.Sprintf("KILL %2d  %s → %s  at %-9s +%-6s  failover %-6s  violations %d  ops: %s", k, rd.from, rd.to,
			rd.primary.kind, rd.delay.Round(10*time.Millisecond), rd.failover.Round(10*time.Millisecond), rd.viol, strings.Join(ops, ", ")))
	}
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	logLine(fmt.Sprintf("failover after SIGKILL: p50 %s p90 %s max %s (bound lease + 2×retry + 1s = %s)",
		pct(sorted, 50), pct(sorted, 90), sorted[len(sorted)-1].Round(10*time.Millisecond), labTiming.bound()))
	logLine(fmt.Sprintf("ops cut by a kill, by kind: %v", r.cuts))
	for _, key := range slices.Sorted(maps.Keys(r.outcomes)) {
		logLine(fmt.Sprintf("outcome  %-40s %d", key, r.outcomes[key]))
	}
	logLine(fmt.Sprintf("wall time %s (lab up and down not counted), violations %d, seed %d", time.Since(t0).Round(time.Second), r.nviol, r.seed))
	for _, kind := range []string{"Create", "Configure", "Drain", "Delete", "Migrate"} {
		if r.cuts[kind] < 2 {
			t.Errorf("only %d %s cut by a kill; want several of each kind", r.cuts[kind], kind)
		}
	}
	_ = os.MkdirAll(filepath.Join(root, "out"), 0o755)
	_ = os.WriteFile(filepath.Join(root, "out/test-ha-lab.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
