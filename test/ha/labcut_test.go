//go:build ha

package ha

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// hostEvent is one libvirt domain event a lab host emitted, as `virsh
// event --timestamp` inside the host printed it.
type hostEvent struct {
	host string
	at   time.Time
	line string
}

// mutatingEvents are the event kinds a provider's call causes; those a
// guest causes by itself (agent-lifecycle, rtc-change, reboot, ...) are
// not mutations by the leader.
var mutatingEvents = []string{"'lifecycle'", "'metadata-change'", "'device-added'", "'device-removed'",
	"'device-removal-failed'", "'job-completed'", "'block-job'", "'block-job-2'"}

// eventWatch runs `virsh event --all --loop --timestamp` inside each zone
// host and keeps the test's domains' events.
type eventWatch struct {
	mu     sync.Mutex
	events []hostEvent
	cmds   []*exec.Cmd
}

func (r *labRig) watchEvents() *eventWatch {
	w := &eventWatch{}
	for _, h := range labZoneHosts {
		cmd := exec.Command(r.env.Script, "exec", h, "virsh", "-c", "qemu:///system", "event", "--all", "--loop", "--timestamp")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.StdoutPipe()
		if err != nil {
			r.t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			r.t.Fatal(err)
		}
		w.cmds = append(w.cmds, cmd)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				if !strings.Contains(line, meta.NamePrefix(labName)) {
					continue
				}
				at := time.Now()
				if ts, _, ok := strings.Cut(line, ": event "); ok {
					if p, err := time.Parse("2006-01-02 15:04:05.000-0700", ts); err == nil {
						at = p
					}
				}
				w.mu.Lock()
				w.events = append(w.events, hostEvent{h, at, line})
				w.mu.Unlock()
			}
		}()
	}
	r.t.Cleanup(w.stop)
	// virsh registers its callbacks once connected: give it a moment.
	time.Sleep(2 * time.Second)
	return w
}

func (w *eventWatch) stop() {
	for _, cmd := range w.cmds {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	}
	w.cmds = nil
}

// mutations are the mutating events in [from, to).
func (w *eventWatch) mutations(from, to time.Time) []hostEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []hostEvent
	for _, e := range w.events {
		if e.at.Before(from) || !e.at.Before(to) {
			continue
		}
		for _, kind := range mutatingEvents {
			if strings.Contains(e.line, kind) {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

func (w *eventWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events)
}

// TestLabCutFromAPI: HA_LAB_CUTS times (2 by default), the leader cut
// from the apiserver (frozen with SIGSTOP; not from the hosts) while its
// mutations run on the lab's hosts. Its last successful renewal (the
// Lease's renewTime, read just before the freeze) was at or before the
// cut, so the lease expires at that renewal + the lease, and its renew
// deadline passes at cut + renew at the latest. Against the hosts' own
// libvirt events: no domain is mutated after the lease's expiry while the
// API stays frozen (nobody else can lead); events between the renew
// deadline + one bounded call and the expiry are logged. The leader refuses calls before the lease can expire
// and exits non-zero; once the API is back the standby takes over and
// every operation the old leader acknowledged is judged as in
// TestLabFailover, with the fence, binding and host checks.
func TestLabCutFromAPI(t *testing.T) {
	r := newLabRig(t, "lab-cut")
	cuts := 2
	if n, err := strconv.Atoi(os.Getenv("HA_LAB_CUTS")); err == nil && n > 0 {
		cuts = n
	}
	// Two machines IDLE first, so that the cut meets Configures or
	// migrations beside Creates.
	before := r.settled(0)
	for _, lm := range r.ms[:2] {
		op := r.nextOp(lm, before[lm.id])
		if err := r.send(op); err != nil {
			t.Fatalf("Create %s: %v", lm.id, err)
		}
		r.await(0, op, time.Now())
	}
	for k := 1; k <= cuts; k++ {
		r.cutFromAPI(k)
	}
}

// cutFromAPI is one cut: every settled machine gets its next operation,
// the apiserver is frozen at a seeded point, and the hosts' events judge
// the leader; then the API comes back and the takeover is judged.
func (r *labRig) cutFromAPI(k int) {
	t := r.t
	standby := other(r.leader, r.a, r.b)
	if !waitReady(standby, r.leader, 30*time.Second) {
		r.violate(k, "leader %s not ready (/readyz %q) or standby %s not naming it 30 s after the last takeover", r.leader.name, readyz(r.leader), standby.name)
	}
	w := r.watchEvents()
	before := r.settled(k)
	var ops []*labOp
	for _, lm := range r.ms {
		if op := r.nextOp(lm, before[lm.id]); op != nil {
			if err := r.send(op); err != nil {
				r.violate(k, "%s of %s (%s) refused by the settled leader: %v", op.kind, lm.id, op.from, err)
				continue
			}
			ops = append(ops, op)
		}
	}
	delay := r.draws.Between(300*time.Millisecond, 2*time.Second)
	r.watchUntil(ops, time.Now().Add(delay), false)
	r.markCut(ops)
	leader := r.leader
	api := r.k.apiserverPID(t)
	// The lease can expire no sooner than its last renewal (read just
	// before the freeze; a later one only moves it on) + the lease.
	renewed := readLease(t, r.k, r.lease).Spec.RenewTime
	cutAt := time.Now()
	if err := syscall.Kill(api, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			_ = syscall.Kill(api, syscall.SIGCONT)
			resumed = true
		}
	}
	defer resume()
	var refusedAt time.Time
	for time.Since(cutAt) < labTiming.lease+time.Second {
		if _, err := leader.list(t.Context()); status.Code(err) == codes.Unavailable {
			refusedAt = time.Now()
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	select {
	case <-leader.done:
	case <-time.After(10 * time.Second):
		t.Errorf("leader %s did not exit within 10 s of the cut:\n%s", leader.name, leader.tail())
	}
	// Frozen until well past the lease: any mutation seen meanwhile is the
	// old leader's.
	time.Sleep(time.Until(cutAt.Add(labTiming.lease + 2*time.Second)))
	resumeAt := time.Now()
	resume()
	bound := cutAt.Add(labTiming.renew + 500*time.Millisecond) // renew deadline + one bounded call, at the latest
	expiry := cutAt.Add(labTiming.renew + 500*time.Millisecond)
	if renewed != nil {
		expiry = renewed.Add(labTiming.lease)
	}
	var cut []string
	for _, op := range ops {
		cut = append(cut, fmt.Sprintf("%s %s (cut %v)", op.kind, op.m.id, op.cut))
	}
	t.Logf("cut %d: %s into %v; leader %s refused %s after the cut, exited %v; events: %d before the renew deadline, %d in the call's allowance, %d after it while frozen",
		k, delay.Round(10*time.Millisecond), cut, leader.name, refusedAt.Sub(cutAt).Round(time.Millisecond), leader.exitErr,
		len(w.mutations(cutAt, cutAt.Add(labTiming.renew))), len(w.mutations(cutAt.Add(labTiming.renew), bound)), len(w.mutations(bound, resumeAt)))
	for _, e := range w.mutations(cutAt.Add(labTiming.renew), bound) {
		t.Logf("within the call's allowance (+%s): %s %s", e.at.Sub(cutAt).Round(time.Millisecond), e.host, e.line)
	}
	// Nobody else may lead before the lease expires: a mutation after it
	// while the API is frozen is the old leader acting past its lease.
	// Between the renew deadline + one call and the expiry come only the
	// host's own follow-ups of work stopped at the deadline (an aborted
	// migration's destination torn down): logged, and counted.
	for _, e := range w.mutations(bound, expiry) {
		t.Logf("after the renew deadline + one call, before the lease's expiry (+%s): %s %s", e.at.Sub(cutAt).Round(time.Millisecond), e.host, e.line)
	}
	t.Logf("cut %d: last renewal %s before the cut, so the lease expires at +%s", k,
		cutAt.Sub(expiry.Add(-labTiming.lease)).Round(time.Millisecond), expiry.Sub(cutAt).Round(time.Millisecond))
	for _, e := range w.mutations(expiry, resumeAt) {
		r.violate(k, "%s mutated %s after the cut, past the lease's expiry (+%s, its last renewal + %s), the API frozen: %s",
			e.host, e.at.Sub(cutAt).Round(time.Millisecond), expiry.Sub(cutAt).Round(time.Millisecond), labTiming.lease, e.line)
	}
	if refusedAt.IsZero() || refusedAt.Sub(cutAt) >= labTiming.lease {
		r.violate(k, "leader %s did not refuse calls before its lease could expire (refused at %v after the cut)", leader.name, refusedAt.Sub(cutAt))
	}
	var ee *exec.ExitError
	if !errors.As(leader.exitErr, &ee) || ee.ExitCode() == 0 || !strings.Contains(leader.tail(), "lost the leader lease") {
		r.violate(k, "leader exit %v; want non-zero naming the lost lease:\n%s", leader.exitErr, leader.tail())
	}
	if got, _ := waitLeader(t, labTiming.lease+labTiming.bound(), standby); got != standby {
		t.Fatalf("%s serves after the API came back, not the standby", got.name)
	}
	t.Logf("standby %s served %s after the API came back (%d events seen in all)", standby.name, time.Since(resumeAt).Round(time.Millisecond), w.count())
	r.leader = standby
	leader.start(t) // back, as the standby
	for _, op := range ops {
		r.await(k, op, resumeAt)
	}
	w.stop()
	r.checkBindings(k, ops)
	r.checkFences(k)
	r.checkHosts(k)
	for _, op := range ops {
		t.Logf("cut %d outcome: %s of %s (cut %v): %s", k, op.kind, op.m.id, op.cut, op.out)
	}
}
