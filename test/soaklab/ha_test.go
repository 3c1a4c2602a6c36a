//go:build soaklab

package soaklab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// SOAK_HA=1 runs the soak on two bin/libvirt with --leader-elect against a
// real kube-apiserver (scripts/kube-apiserver.sh), as the chart runs them
// (docs/ha.md): each its own --state, one Lease and its shared journal.
// The callers reach them as BigFleet reaches the chart's Service: a TCP
// front (leaderFront) that sends each new connection to the replica whose
// /readyz answers 200 (a standby's is 503: never an endpoint) and cuts the
// connections of a replica that stopped being ready. Every fault on "the
// provider" acts on the leader, and provider-failover SIGKILLs it and
// restarts it as the standby once the other leads.

// provFailover is the HA run's own fault.
const provFailover soakkit.FaultKind = "provider-failover"

// haLease is the HA run's election timing: the lab's TCG hosts answer
// slowly under faults, so a libvirt call gets 1.5 s, which fits the 2 s
// between lease and renew with 0.5 s left (the startup check's rule).
const (
	haLeaseName = "soaklab"
	haLease     = 6 * time.Second
	haRenew     = 4 * time.Second
	haRetry     = 500 * time.Millisecond
	haCall      = 1500 * time.Millisecond
)

// haBound is how soon the standby must lead after the leader dies.
const haBound = haLease + 2*haRetry + time.Second

// haDarkBound is haBound when a host fault was in force around the kill:
// the new leader is ready only once its first listing has every zone's
// machines (a read before it would answer from the empty records of a
// lost state), and that listing waits up to one call bound on a host that
// went dark too recently for its connection to be known lost
// (docs/ha.md, "Taking over").
const haDarkBound = haBound + haCall

// hostFaultsBetween counts the faults on a host (not on the provider)
// that overlapped [from, to].
func (s *soak) hostFaultsBetween(from, to time.Time) int {
	n := 0
	for _, m := range menu {
		if !onProvider(m.kind) {
			n += len(s.led.FaultsBetween(m.kind, from, to))
		}
	}
	for _, k := range []soakkit.FaultKind{hostOffAdmin, hostOffFenced} {
		n += len(s.led.FaultsBetween(k, from, to))
	}
	return n
}

var kubeScript = func() string { d, _ := filepath.Abs("../../scripts/kube-apiserver.sh"); return d }()

// startKube brings up etcd and an apiserver in dir and creates the shared
// journal's ConfigMap (the chart does, before the provider starts); it
// returns the kubeconfig and a stop function.
func startKube(dir string) (string, func(), error) {
	out, err := exec.Command(kubeScript, "up", dir).CombinedOutput()
	if err != nil {
		return "", nil, fmt.Errorf("kube-apiserver.sh up: %v\n%s", err, out)
	}
	stop := func() { _ = exec.Command(kubeScript, "down", dir).Run() }
	kc := filepath.Join(dir, "kubeconfig")
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err == nil {
		var cs kubernetes.Interface
		if cs, err = kubernetes.NewForConfig(rc); err == nil {
			_, err = cs.CoreV1().ConfigMaps("default").Create(context.Background(),
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: haLeaseName + "-intents"}}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				err = nil
			}
		}
	}
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("the journal ConfigMap: %w", err)
	}
	return kc, stop, nil
}

// haFlags are one candidate's election flags.
func haFlags(kubeconfig string) []string {
	return []string{"--leader-elect", "--kubeconfig=" + kubeconfig, "--leader-elect-lease-name=" + haLeaseName,
		"--leader-elect-lease=" + haLease.String(), "--leader-elect-renew=" + haRenew.String(),
		"--leader-elect-retry=" + haRetry.String(), "--libvirt-call-timeout=" + haCall.String()}
}

// httpStatus is the status of a GET on the replica's ops server (0: no
// answer).
func httpStatus(addr, path string) int {
	c := http.Client{Timeout: time.Second}
	res, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// leaderFront is the Service in front of the replicas: it polls each one's
// /readyz and forwards a new connection to the one that is ready.
type leaderFront struct {
	ln      net.Listener
	backs   []string // gRPC addresses
	metrics []string // ops addresses
	// onChange is called when a replica becomes the ready one after
	// another, or after none was (the same one restarted and leading
	// again).
	onChange func(from, to int)

	mu    sync.Mutex
	cur   int // ready replica, -1: none
	conns map[int]map[net.Conn]bool
	stop  chan struct{}
}

func newLeaderFront(addr string, backs, metrics []string, onChange func(from, to int)) (*leaderFront, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	f := &leaderFront{ln: ln, backs: backs, metrics: metrics, onChange: onChange, cur: -1,
		conns: map[int]map[net.Conn]bool{}, stop: make(chan struct{})}
	go f.poll()
	go f.serve()
	return f, nil
}

func (f *leaderFront) close() {
	close(f.stop)
	f.ln.Close()
	f.mu.Lock()
	for _, cs := range f.conns {
		for c := range cs {
			c.Close()
		}
	}
	f.mu.Unlock()
}

// current is the ready replica, -1 when none is.
func (f *leaderFront) current() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

// poll follows readiness every 100 ms. A replica that stops being ready
// loses its connections at once (it answers nothing the callers want).
func (f *leaderFront) poll() {
	last, gap, seen := -1, true, 0
	for {
		select {
		case <-f.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		ready := -1
		for i, m := range f.metrics {
			if httpStatus(m, "/readyz") == http.StatusOK {
				ready = i
				break
			}
		}
		// A change counts once two polls in a row agree: one /readyz slow
		// on a loaded machine must not cut the leader's connections.
		if f.current() != ready {
			if seen++; seen < 2 {
				continue
			}
		}
		seen = 0
		f.mu.Lock()
		prev := f.cur
		f.cur = ready
		if prev >= 0 && prev != ready {
			for c := range f.conns[prev] {
				c.Close()
			}
		}
		f.mu.Unlock()
		if ready < 0 {
			gap = true
		} else if ready != last || gap {
			if f.onChange != nil {
				f.onChange(last, ready)
			}
			last, gap = ready, false
		}
	}
}

func (f *leaderFront) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.forward(c)
	}
}

// forward joins a caller's connection to the ready replica; with none
// ready for 2 s the caller's connection is closed (Unavailable: it
// retries).
func (f *leaderFront) forward(c net.Conn) {
	deadline := time.Now().Add(2 * time.Second)
	i := f.current()
	for i < 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		i = f.current()
	}
	if i < 0 {
		c.Close()
		return
	}
	b, err := net.DialTimeout("tcp", f.backs[i], 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	f.mu.Lock()
	if f.conns[i] == nil {
		f.conns[i] = map[net.Conn]bool{}
	}
	f.conns[i][c], f.conns[i][b] = true, true
	f.mu.Unlock()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	wg.Go(func() { pipe(b, c) })
	wg.Go(func() { pipe(c, b) })
	wg.Wait()
	f.mu.Lock()
	delete(f.conns[i], c)
	delete(f.conns[i], b)
	f.mu.Unlock()
}

// leaderIdx waits up to within for a ready replica other than not (-1:
// any) and returns it with how long it took.
func (s *soak) leaderIdx(not int, within time.Duration) (int, time.Duration, error) {
	t0 := time.Now()
	for {
		if i := s.front.current(); i >= 0 && i != not {
			return i, time.Since(t0), nil
		}
		if time.Since(t0) > within {
			return -1, time.Since(t0), fmt.Errorf("no replica led within %s", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leaderProc is the provider the faults act on: the only one, or the
// leader (waiting for one to lead, as a fault needs one).
func (s *soak) leaderProc() (int, *soakkit.Proc, error) {
	if !s.p.HA {
		return 0, s.procs[0], nil
	}
	i, _, err := s.leaderIdx(-1, 2*haBound)
	if err != nil {
		return -1, nil, err
	}
	return i, s.procs[i], nil
}

// failover SIGKILLs the leader, waits for the other replica to lead (it
// must within haBound) and restarts the killed one as the standby.
func (s *soak) failover() (string, error) {
	i, pr, err := s.leaderProc()
	if err != nil {
		return "", err
	}
	pr.Kill()
	s.markRestart()
	// Timed on the other replica's /readyz itself, not through the
	// front's polling.
	j, t0 := 1-i, time.Now()
	for httpStatus(s.front.metrics[j], "/readyz") != http.StatusOK && time.Since(t0) < 3*haBound {
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(t0)
	if took >= 3*haBound {
		err = fmt.Errorf("replica %d not ready %s after the SIGKILL of %d", j, took.Round(time.Second), i)
	}
	bound := haBound
	if s.hostFaultsBetween(t0, time.Now()) > 0 {
		bound = haDarkBound
	}
	if err == nil && took > bound {
		s.violate(soakkit.ClOther, "failover-slow|"+time.Now().String(),
			fmt.Sprintf("replica %d led %s after the SIGKILL of %d, over the bound %s", j, took.Round(100*time.Millisecond), i, bound), nil)
	}
	s.noteTakeover(took)
	if rerr := pr.Start(); err == nil {
		err = rerr
	}
	return fmt.Sprintf("replica %d SIGKILLed, replica %d led after %s, %d back as standby", i, j, took.Round(100*time.Millisecond), i), err
}

// leads is the front's news: replica to is ready after from (or after
// none). It is when the acting provider started acting, and a change of
// replica is a failover.
func (s *soak) leads(from, to int) {
	s.mu.Lock()
	s.leadSince = time.Now()
	s.mu.Unlock()
	if from >= 0 && from != to {
		s.nfailover.Add(1)
	}
	s.logf("replica %d (%s) leads", to, s.names[to])
}

// afterProviderFault waits, in the HA run, until some replica leads again
// after a fault on the leader (the restarted one may win the lease back).
func (s *soak) afterProviderFault() error {
	if !s.p.HA {
		return nil
	}
	_, _, err := s.leaderIdx(-1, 3*haBound)
	return err
}

func (s *soak) noteTakeover(took time.Duration) {
	s.mu.Lock()
	s.takeovers = append(s.takeovers, took)
	s.mu.Unlock()
}

// lastStart is when the acting provider started acting: its start, or in
// the HA run when the front saw it become ready.
func (s *soak) lastStart() time.Time {
	if !s.p.HA {
		return s.procs[0].LastStart()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leadSince
}

// stopAll stops every replica with SIGTERM, the standby first; each must
// exit by itself.
func (s *soak) stopAll() {
	order := []int{0}
	if s.p.HA {
		l := s.front.current()
		order = []int{1 - max(l, 0), max(l, 0)}
	}
	for _, i := range order {
		if took, self := s.procs[i].Term(s.p.ShutdownTimeout + 20*time.Second); !self {
			s.violate(soakkit.ClOther, fmt.Sprintf("term-end|%d", i), fmt.Sprintf("provider %d ignored SIGTERM at the end for %s", i, took.Round(time.Second)), nil)
		}
	}
}
