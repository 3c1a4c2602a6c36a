//go:build ha

// Package ha is issue 41's test of record: two bin/libvirt processes with
// --leader-elect against a real kube-apiserver and etcd on loopback
// (scripts/kube-apiserver.sh), driven by a grpc-go client. `make test-ha`
// runs the tests; `make bench-ha` the failover figures (docs/ha.md).
package ha

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

const method = "/bigfleet.v1alpha1.CapacityProvider/"

var root = func() string { d, _ := filepath.Abs("../.."); return d }()

// timing is one leader-election setting.
type timing struct {
	name                string
	lease, renew, retry time.Duration
	callTimeout         string // --libvirt-call-timeout that fits the margin
}

var (
	short   = timing{"short lease 4s/3s/0.5s", 4 * time.Second, 3 * time.Second, 500 * time.Millisecond, "500ms"}
	chartTm = timing{"chart defaults 15s/10s/2s", 15 * time.Second, 10 * time.Second, 2 * time.Second, "4s"}
)

// bound is how soon the standby must serve after the leader dies.
func (tm timing) bound() time.Duration { return tm.lease + 2*tm.retry + time.Second }

// kube is a real apiserver + etcd (scripts/kube-apiserver.sh up).
type kube struct {
	dir, kubeconfig string
}

func startKube(t *testing.T) *kube {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command(filepath.Join(root, "scripts/kube-apiserver.sh"), "up", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kube-apiserver.sh up: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(filepath.Join(root, "scripts/kube-apiserver.sh"), "down", dir).Run() })
	return &kube{dir: dir, kubeconfig: filepath.Join(dir, "kubeconfig")}
}

func (k *kube) apiserverPID(t *testing.T) int {
	b, err := os.ReadFile(filepath.Join(k.dir, "apiserver.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// provider is one bin/libvirt process.
type provider struct {
	name          string
	addr, metrics string
	cmd           *exec.Cmd
	done          chan struct{}
	exitErr       error
	conn          *grpc.ClientConn
	logFile       string
	args          []string
	env           []string // added to the environment (LD_LIBRARY_PATH on the lab)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func binary(t *testing.T) string {
	if b := os.Getenv("LIBVIRT_BIN"); b != "" {
		return b
	}
	b := filepath.Join(root, "bin/libvirt")
	if _, err := os.Stat(b); err != nil {
		t.Fatalf("no %s: run make build (or set LIBVIRT_BIN)", b)
	}
	return b
}

// newProvider configures (does not start) candidate name on the fake
// backend.
func newProvider(t *testing.T, k *kube, name, lease string, tm timing) *provider {
	return newProviderOn(t, k, name, lease, tm, "--use-fake-backend", "--seed-count=40")
}

// newProviderOn configures candidate name with the backend flags given.
func newProviderOn(t *testing.T, k *kube, name, lease string, tm timing, backend ...string) *provider {
	p := &provider{name: name, addr: freeAddr(t), metrics: freeAddr(t),
		logFile: filepath.Join(t.TempDir(), name+".log")}
	p.args = append(backend, "--leader-elect",
		"--kubeconfig="+k.kubeconfig, "--leader-elect-lease-name="+lease,
		"--leader-elect-lease="+tm.lease.String(), "--leader-elect-renew="+tm.renew.String(),
		"--leader-elect-retry="+tm.retry.String(), "--libvirt-call-timeout="+tm.callTimeout,
		"--addr="+p.addr, "--metrics-addr="+p.metrics, "--log-format=text")
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p.conn = conn
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *provider) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(p.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(binary(t), p.args...)
	p.cmd.Env = append(append(os.Environ(), "POD_NAME="+p.name), p.env...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.done, p.exitErr = make(chan struct{}), nil
	go func(cmd *exec.Cmd, done chan struct{}) {
		p.exitErr = cmd.Wait()
		log.Close()
		close(done)
	}(p.cmd, p.done)
	// Serving: /healthz answers (a standby too).
	deadline := time.Now().Add(15 * time.Second)
	for !p.healthy() {
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("%s not healthy: %s", p.name, p.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *provider) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *provider) kill() {
	if p.cmd != nil && p.cmd.Process != nil && !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

func (p *provider) pid() int { return p.cmd.Process.Pid }

func (p *provider) get(path string) int {
	c := http.Client{Timeout: time.Second}
	res, err := c.Get("http://" + p.metrics + path)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// acting is the leader_acting gauge's value ("" when absent).
func (p *provider) acting() string {
	c := http.Client{Timeout: time.Second}
	res, err := c.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "leader_acting "); ok {
			return v
		}
	}
	return ""
}

func (p *provider) healthy() bool { return p.get("/healthz") == http.StatusOK }
func (p *provider) ready() bool   { return p.get("/readyz") == http.StatusOK }

// list calls CapacityProvider.List through grpc-go.
func (p *provider) list(ctx context.Context) (*pb.MachineList, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var res pb.MachineList
	err := p.conn.Invoke(ctx, method+"List", &pb.ListFilter{}, &res)
	return &res, err
}

func (p *provider) create(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var res pb.TransitionAck
	return p.conn.Invoke(ctx, method+"Create", &pb.CreateRequest{MachineId: id}, &res)
}

func (p *provider) tail() string {
	b, _ := os.ReadFile(p.logFile)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// rss is the process's resident set (VmRSS) in KiB.
func (p *provider) rss() int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// waitLeader waits until exactly one of ps serves, and returns it.
func waitLeader(t *testing.T, within time.Duration, ps ...*provider) (*provider, time.Duration) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		for _, p := range ps {
			if p.exited() {
				continue
			}
			if _, err := p.list(t.Context()); err == nil {
				return p, time.Since(start)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range ps {
		t.Logf("%s log:\n%s", p.name, p.tail())
	}
	t.Fatalf("no leader served within %s", within)
	return nil, 0
}

// checkStandby: a standby is alive, not ready, and answers every RPC with
// Unavailable naming the leader.
func checkStandby(t *testing.T, standby, leader *provider) {
	t.Helper()
	if !standby.healthy() {
		t.Errorf("standby %s: /healthz not ok", standby.name)
	}
	if standby.ready() {
		t.Errorf("standby %s: /readyz ok; only the leader may be ready", standby.name)
	}
	if !leader.ready() {
		t.Errorf("leader %s: /readyz not ok", leader.name)
	}
	if got := standby.acting(); got != "0" {
		t.Errorf("standby %s: leader_acting %q, want 0", standby.name, got)
	}
	if got := leader.acting(); got != "1" {
		t.Errorf("leader %s: leader_acting %q, want 1", leader.name, got)
	}
	for _, call := range []func() error{
		func() error { _, err := standby.list(t.Context()); return err },
		func() error { return standby.create(t.Context(), "m-standby") },
	} {
		err := call()
		st, _ := status.FromError(err)
		if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "the leader is "+leader.name) {
			t.Errorf("standby %s answered %v; want Unavailable naming the leader %s", standby.name, err, leader.name)
		}
	}
}

// other is the candidate of the pair that is not p.
func other(p, a, b *provider) *provider {
	if p == a {
		return b
	}
	return a
}

// accept creates one free slot on the leader; the accepted operation must
// be visible in its List.
func accept(t *testing.T, p *provider) {
	t.Helper()
	res, err := p.list(t.Context())
	if err != nil {
		t.Fatalf("leader List: %v", err)
	}
	for _, m := range res.GetMachines() {
		if m.GetState() == pb.MachineState_MACHINE_STATE_SPECULATIVE {
			if err := p.create(t.Context(), m.GetId()); err != nil {
				t.Fatalf("leader Create %s: %v", m.GetId(), err)
			}
			return
		}
	}
	t.Fatal("no SPECULATIVE slot to create")
}

// failovers kills the leader n times (restarting it as a standby each
// time) and returns each failover time: SIGKILL to the other's first
// successful call.
func failovers(t *testing.T, k *kube, tm timing, lease string, n int) (times []time.Duration, standbyRSS, leaderRSS []int) {
	a := newProvider(t, k, "pod-a", lease, tm)
	b := newProvider(t, k, "pod-b", lease, tm)
	a.start(t)
	b.start(t)
	leader, _ := waitLeader(t, tm.lease+tm.bound(), a, b)
	for i := 0; i < n; i++ {
		standby := other(leader, a, b)
		if !waitReady(standby, leader, 5*time.Second) {
			t.Fatalf("kill %d: leader %s not ready or standby %s saw no leader", i, leader.name, standby.name)
		}
		checkStandby(t, standby, leader)
		accept(t, leader)
		standbyRSS, leaderRSS = append(standbyRSS, standby.rss()), append(leaderRSS, leader.rss())
		killedAt := time.Now()
		_ = leader.cmd.Process.Signal(syscall.SIGKILL)
		<-leader.done
		got, _ := waitLeader(t, 2*tm.bound(), standby)
		if got != standby {
			t.Fatalf("kill %d: %s served, not the standby", i, got.name)
		}
		d := time.Since(killedAt)
		times = append(times, d)
		t.Logf("kill %d (%s): %s served %s after SIGKILL of %s", i+1, tm.name, standby.name, d.Round(time.Millisecond), leader.name)
		if d > tm.bound() {
			t.Errorf("kill %d: standby served %s after the kill; want within lease + 2×retry + 1s = %s", i+1, d, tm.bound())
		}
		leader.start(t) // back as a standby
		leader = standby
	}
	return times, standbyRSS, leaderRSS
}

// waitReady waits for the leader's readiness and the standby's knowing it.
func waitReady(standby, leader *provider, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		_, err := standby.list(context.Background())
		if leader.ready() && err != nil && strings.Contains(err.Error(), "the leader is "+leader.name) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// TestFailover: SIGKILL the leader three times; each time the standby
// serves within lease + 2×retry + 1s, and in between the standby is alive,
// not ready, and refuses every call naming the leader.
func TestFailover(t *testing.T) {
	k := startKube(t)
	failovers(t, k, short, "failover", 3)
}

// TestCutFromAPI: a leader that cannot reach the API (the apiserver
// frozen with SIGSTOP; no netem on this kernel) refuses calls before its
// lease can expire, and exits non-zero; once the API is back the other
// candidate leads.
func TestCutFromAPI(t *testing.T) {
	k := startKube(t)
	tm := short
	a := newProvider(t, k, "pod-a", "cut", tm)
	b := newProvider(t, k, "pod-b", "cut", tm)
	a.start(t)
	b.start(t)
	leader, _ := waitLeader(t, tm.lease+tm.bound(), a, b)
	standby := other(leader, a, b)
	if !waitReady(standby, leader, 5*time.Second) {
		t.Fatal("no settled leader")
	}
	accept(t, leader)
	api := k.apiserverPID(t)
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
	// The lease was last renewed at or before the cut: it cannot expire
	// before cutAt + lease. The leader must refuse before that.
	var refusedAt time.Time
	for time.Since(cutAt) < tm.lease+time.Second {
		_, err := leader.list(t.Context())
		if err != nil {
			if st, _ := status.FromError(err); st.Code() == codes.Unavailable {
				refusedAt = time.Now()
				break
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	if refusedAt.IsZero() {
		t.Fatalf("leader %s kept serving %s after the cut:\n%s", leader.name, tm.lease+time.Second, leader.tail())
	}
	stopAfter := refusedAt.Sub(cutAt)
	t.Logf("leader %s refused %s after the cut (lease %s, renew %s)", leader.name, stopAfter.Round(time.Millisecond), tm.lease, tm.renew)
	if stopAfter >= tm.lease {
		t.Errorf("leader refused %s after the cut; want before the lease (%s) can expire", stopAfter, tm.lease)
	}
	select {
	case <-leader.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("leader %s did not exit after losing its lease:\n%s", leader.name, leader.tail())
	}
	var ee *exec.ExitError
	if !errors.As(leader.exitErr, &ee) || ee.ExitCode() == 0 {
		t.Errorf("leader exit %v; want non-zero (Kubernetes restarts it as a standby)", leader.exitErr)
	}
	if !strings.Contains(leader.tail(), "lost the leader lease") {
		t.Errorf("leader log does not give the cause:\n%s", leader.tail())
	}
	resume()
	got, _ := waitLeader(t, tm.lease+tm.bound(), standby)
	if got != standby {
		t.Fatalf("%s serves after the API came back, not the standby", got.name)
	}
}

// TestGracefulHandover: on SIGTERM the leader finishes its work, releases
// the Lease and exits 0; the standby takes over at its next retry, well
// before the lease would have expired.
func TestGracefulHandover(t *testing.T) {
	k := startKube(t)
	tm := short
	a := newProvider(t, k, "pod-a", "graceful", tm)
	b := newProvider(t, k, "pod-b", "graceful", tm)
	a.start(t)
	b.start(t)
	leader, _ := waitLeader(t, tm.lease+tm.bound(), a, b)
	standby := other(leader, a, b)
	if !waitReady(standby, leader, 5*time.Second) {
		t.Fatal("no settled leader")
	}
	accept(t, leader)
	termAt := time.Now()
	_ = leader.cmd.Process.Signal(syscall.SIGTERM)
	got, _ := waitLeader(t, tm.bound(), standby)
	took := time.Since(termAt)
	if got != standby {
		t.Fatal("the standby did not take over")
	}
	<-leader.done
	if leader.exitErr != nil {
		t.Errorf("leader exit on SIGTERM: %v; want 0\n%s", leader.exitErr, leader.tail())
	}
	t.Logf("standby %s served %s after SIGTERM of %s", standby.name, took.Round(time.Millisecond), leader.name)
	// Released, not expired: a retry period plus the shutdown and start.
	if took >= tm.lease {
		t.Errorf("handover took %s: the Lease was not released (lease %s)", took, tm.lease)
	}
}
