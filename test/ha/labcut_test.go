//go:build ha

package ha

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
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
	// Machines IDLE first, until one is on lab1 (only lab1-born machines
	// migrate), so that the cuts meet Configures and a migration beside
	// Creates.
	before := r.settled(0)
	for i, lm := range r.ms {
		if i >= 2 && slices.ContainsFunc(r.ms[:i], func(m *labMachine) bool { return m.born == labZoneHosts[0] }) {
			break
		}
		op := r.nextOp(lm, before[lm.id])
		if err := r.send(op); err != nil {
			t.Fatalf("Create %s: %v", lm.id, err)
		}
		r.await(0, op, time.Now())
	}
	for k := 1; k <= cuts; k++ {
		r.cutFromAPI(k, k == 1)
	}
}

// migrateAtCut is the operation cut k gives lm: a live migration when
// the cut must meet one and lm can make it (the first such machine),
// else the machine's next operation.
func (r *labRig) migrateAtCut(lm *labMachine, m *pb.Machine, want *bool) *labOp {
	if *want && canStart(lm, m, "Migrate") {
		*want = false
		return r.opOf(lm, m, "Migrate")
	}
	return r.nextOp(lm, m)
}

// cutFromAPI is one cut: every settled machine gets its next operation,
// the apiserver is frozen at a seeded point, and the hosts' events judge
// the leader; then the API comes back and the takeover is judged. With
// migrate, one machine's operation is a live migration, and the freeze
// comes while it runs (a migration has the most to unwind: docs/ha.md,
// "Live migrations").
func (r *labRig) cutFromAPI(k int, migrate bool) {
	t := r.t
	standby := other(r.leader, r.a, r.b)
	if !waitReady(standby, r.leader, 30*time.Second) {
		r.violate(k, "leader %s not ready (/readyz %q) or standby %s not naming it 30 s after the last takeover", r.leader.name, readyz(r.leader), standby.name)
	}
	w := r.watchEvents()
	before := r.settled(k)
	var ops []*labOp
	wantMigration := migrate
	for _, lm := range r.ms {
		if op := r.migrateAtCut(lm, before[lm.id], &wantMigration); op != nil {
			if err := r.send(op); err != nil {
				r.violate(k, "%s of %s (%s) refused by the settled leader: %v", op.kind, lm.id, op.from, err)
				continue
			}
			ops = append(ops, op)
		}
	}
	if wantMigration {
		t.Fatalf("cut %d must meet a live migration, but no machine can migrate: %v", k, before)
	}
	// A migration's first seconds are the hardest to stop (its phases on
	// the destination start before an abort can reach them).
	delay := r.draws.Between(300*time.Millisecond, 2*time.Second)
	if migrate {
		delay = r.draws.Between(300*time.Millisecond, 1200*time.Millisecond)
	}
	r.watchUntil(ops, time.Now().Add(delay), false)
	r.markCut(ops)
	if migrate && !slices.ContainsFunc(ops, func(op *labOp) bool { return op.kind == "Migrate" && op.cut }) {
		t.Logf("cut %d: the migration ended before the freeze (%s in); the cut meets none", k, delay.Round(10*time.Millisecond))
	}
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
	w.logLast(t, k, cutAt, expiry, resumeAt)
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
		// A migration the freeze met is aborted by the lease's guard,
		// once the last renewal is older than lease − renew: long before
		// the renew deadline's watchdog, which would leave libvirt's
		// unwinding past the lease's expiry.
		if op.kind == "Migrate" && op.cut && op.out == "stayed" && (op.answer == nil || !strings.Contains(op.answer.Error(), guardCause)) {
			r.violate(k, "migration of %s met by the freeze and stayed, but not aborted by the lease's guard: %v", op.m.id, op.answer)
		}
	}
}

// guardCause is in the answer of a migration the lease's guard aborted
// (server/leader.ErrRenewalLate).
const guardCause = "the leader's last lease renewal is older than"

// logLast logs the last mutating event of the cut, from the freeze until
// the API came back, and how far it came before the lease's expiry.
func (w *eventWatch) logLast(t *testing.T, k int, cutAt, expiry, resumeAt time.Time) {
	ev := w.mutations(cutAt, resumeAt)
	if len(ev) == 0 {
		t.Logf("cut %d: no mutating event after the freeze", k)
		return
	}
	e := slices.MaxFunc(ev, func(a, b hostEvent) int { return a.at.Compare(b.at) })
	when := fmt.Sprintf("%s before", expiry.Sub(e.at).Round(time.Millisecond))
	if e.at.After(expiry) {
		when = fmt.Sprintf("%s after", e.at.Sub(expiry).Round(time.Millisecond))
	}
	t.Logf("cut %d: last mutating event at +%s, %s the lease's expiry: %s %s", k,
		e.at.Sub(cutAt).Round(time.Millisecond), when, e.host, e.line)
}
