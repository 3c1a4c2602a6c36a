//go:build soaklab

// Package soaklab is the chaos soak of issue 31 on the lab of remote
// libvirt hosts (scripts/lab.sh, docs/lab.md): a real bin/libvirt serving
// mTLS with --caller-identity=bigfleet over two zones of two lab hosts
// (libvirt 9.0 and 11.3, qemu+tls and qemu+libssh in each zone), churned
// by two BigFleet-like shards, each with its own client certificate
// (bigfleet://shard/<id>), doing Create, Configure, Drain and Delete with
// fencing tokens, plus live migrations through the admin API
// (bigfleet://admin). Faults are drawn at random in bursts that overlap:
// partition, delay, loss, daemon freeze and kill, host reboot, client
// certificate rotation, provider SIGKILL and SIGTERM, state file loss.
// After every burst (once healed and settled) and at the end, the
// invariants are checked against virsh on every host; the run closes with
//
//	soak-lab: K faults (by kind), M operations (by kind), running_copies=0 orphans=0 lost_bindings=0 false_failed=0 stuck=0 books=0 lost_marks=0
//
// SOAK_HA=1 (`make soak-lab-ha`) runs the provider as two replicas with
// --leader-elect on a real apiserver and adds the provider-failover fault
// (ha_test.go).
//
// `make soak-lab` brings the lab up, runs it and takes the lab down;
// docs/reliability.md ("Lab chaos soak") has the commands and figures.
package soaklab

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// The lab soak's own classes, beside soakkit's.
const (
	clRunning = "running_copies"
	clBooks   = "books"
	clMarks   = "lost_marks"
)

// classes is the closing line's order.
var classes = []string{clRunning, soakkit.ClOrphan, soakkit.ClBinding, soakkit.ClFalse, soakkit.ClStuck, clBooks, clMarks}

// Timeouts the provider runs with: generous for TCG guests on 2 cores.
const (
	createTimeout    = 3 * time.Minute
	configureTimeout = 3 * time.Minute
	drainTimeout     = 2 * time.Minute
	deleteTimeout    = 2 * time.Minute
	migrateTimeout   = 2 * time.Minute
	instanceType     = "soaklab.tiny"
	reconcileEvery   = 3 * time.Second
)

// soak is one run: the lab, the provider, the shards and the ledger.
type soak struct {
	p     params
	lab   labEnv
	hosts []labHost
	// procs is the provider: one process, or the two replicas of the HA
	// run (SOAK_HA=1, ha_test.go), each with its --state and name.
	procs  []*soakkit.Proc
	states []string
	names  []string
	front  *leaderFront // the HA run's Service
	admin  *grpc.ClientConn
	led    *soakkit.Ledger
	t0     time.Time
	shards []*shard
	ids    []string
	owner  map[string]*shard
	zone   map[string]string
	domain map[string]string      // machine → the domain name the provider derives
	locks  map[string]*sync.Mutex // held by a client for one whole operation
	stop   atomic.Bool
	nfault atomic.Int64
	// refused counts the stale tokens probed after restarts and refused.
	refused atomic.Int64
	// fenced is the fence command's record (hostoff_test.go); nfenced
	// counts the hosts it fenced outside a host-off fault.
	fenced  string
	nfenced atomic.Int64

	mu        sync.Mutex
	bound     map[string]soakkit.Binding // machines BigFleet saw CONFIGURED, not drained since
	probe     map[string]bool            // machines whose fence marks are to be probed (a provider restart since)
	migrating map[string]bool            // machines with a MigrateMachine call in flight
	holding   atomic.Bool                // a check is gathering machines: clients start no new operation
	leadSince time.Time                  // HA: when the acting replica became ready
	takeovers []time.Duration            // HA: SIGKILL of the leader to the standby leading
	nfailover atomic.Int64               // HA: changes of the leading replica
}

func (s *soak) logf(format string, args ...any) {
	fmt.Printf("[%7.1fs] "+format+"\n", append([]any{time.Since(s.t0).Seconds()}, args...)...)
}

func TestSoakLab(t *testing.T) {
	s := newSoak(t)
	var wg sync.WaitGroup
	for _, id := range s.ids {
		wg.Go(func() { s.owner[id].drive(id) })
	}
	s.runBursts(t)
	s.stop.Store(true)
	s.lockAll() // every client is between operations from here on
	s.logf("faults done; settling")
	s.settle("end")
	s.quiesce("end")
	s.check("end", true)
	s.teardown()
	s.unlockAll()
	wg.Wait()
	s.report(t)
}

// newSoak loads the lab, starts the provider and deals the machines to the
// shards; the lab's hosts are healed and swept whatever happens.
func newSoak(t *testing.T) *soak {
	p, err := loadParams()
	if err != nil {
		t.Fatal(err)
	}
	e, err := loadLab()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no lab (%v): make soak-lab brings it up", err)
		}
		t.Skipf("no lab (%v): run make soak-lab, which runs scripts/lab.sh up 4", err)
	}
	s := &soak{p: p, lab: e, led: soakkit.NewLedger(), t0: time.Now(), owner: map[string]*shard{},
		zone: map[string]string{}, domain: map[string]string{}, locks: map[string]*sync.Mutex{},
		bound: map[string]soakkit.Binding{}, probe: map[string]bool{}, migrating: map[string]bool{}}
	if s.hosts, err = e.soakHosts(); err != nil {
		t.Fatal(err)
	}
	s.logf("soak-lab: %s", p)
	t.Cleanup(func() {
		for _, h := range s.hosts {
			_, _ = s.lab.run(2*time.Minute, "heal", h.Name)
			s.lab.sweep(h.Name, s.prefix())
		}
	})
	for _, h := range s.hosts {
		s.lab.sweep(h.Name, s.prefix()) // an earlier, interrupted run
	}
	if err := s.startProvider(t); err != nil {
		t.Fatal(err)
	}
	if err := s.dealMachines(); err != nil {
		t.Fatal(err)
	}
	s.settle("start")
	return s
}

func (s *soak) prefix() string { return "bf-" + s.p.Provider + "-" }

// startProvider writes the hosts, types and offerings files and the PKI of
// the callers, and starts bin/libvirt on them.
func (s *soak) startProvider(t *testing.T) error {
	dir := t.TempDir()
	if _, err := os.Stat(s.p.Bin); err != nil {
		return fmt.Errorf("provider binary %s: %v (make build)", s.p.Bin, err)
	}
	bin := filepath.Join(dir, "libvirt")
	if err := soakkit.CopyFile(s.p.Bin, bin); err != nil {
		return err
	}
	hostsPath, types, offers := filepath.Join(dir, "hosts.yaml"), filepath.Join(dir, "types.json"), filepath.Join(dir, "offerings.json")
	if err := writeJSON(hostsPath, map[string]any{"hosts": s.hosts}); err != nil {
		return err
	}
	if err := writeJSON(types, []map[string]any{{"name": instanceType, "vcpu": 1, "memory_mib": 256}}); err != nil {
		return err
	}
	var offerings []map[string]any
	for _, z := range []string{"za", "zb"} {
		offerings = append(offerings, map[string]any{"instance_type": instanceType, "zone": z,
			"capacity_type": "on_demand", "count": 2 * s.p.PerZone})
	}
	if err := writeJSON(offers, offerings); err != nil {
		return err
	}
	uris := []string{"bigfleet://admin", "bigfleet://shard/soaklab-0", "bigfleet://shard/soaklab-1"}
	tlsFlags, cfgs, err := soakkit.Callers(dir, uris...)
	if err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	fence, err := s.writeFence(dir)
	if err != nil {
		return err
	}
	args := append([]string{"--provider=" + s.p.Provider, "--hosts=" + hostsPath,
		"--instance-types=" + types, "--offerings=" + offers,
		"--reconcile-interval=" + reconcileEvery.String(), "--log-format=text", "--log-level=info",
		"--create-timeout=" + createTimeout.String(), "--configure-timeout=" + configureTimeout.String(),
		"--drain-timeout=" + drainTimeout.String(), "--delete-timeout=" + deleteTimeout.String(),
		"--migrate-timeout=" + migrateTimeout.String(),
		"--shutdown-timeout=" + s.p.ShutdownTimeout.String(), "--drain-margin=10s",
		"--fence-command=" + fence, "--host-down-after=" + hostDownAfter.String()}, s.lab.Args...)
	args = append(args, tlsFlags...)
	if s.admin, err = dial(addr, cfgs[uris[0]]); err != nil {
		return err
	}
	t.Cleanup(func() { s.admin.Close() })
	for i := range 2 {
		c, err := dial(addr, cfgs[uris[1+i]])
		if err != nil {
			return err
		}
		t.Cleanup(func() { c.Close() })
		s.shards = append(s.shards, &shard{s: s, id: fmt.Sprintf("soaklab-%d", i), epoch: int64(i + 1), conn: c,
			Draws: soakkit.NewDraws(s.p.Seed, uint64(i))})
	}
	// One log for every process (the violations quote it).
	logPath := filepath.Join(dir, "provider.log")
	t.Cleanup(func() {
		for _, pr := range s.procs {
			pr.Kill()
		}
		if s.front != nil {
			s.front.close()
		}
		// SOAK_KEEP_LOG names a file to keep the provider's log in; a
		// failed run keeps it in out/ for the post-mortem anyway (the
		// violations quote only their machine's lines).
		keep := os.Getenv("SOAK_KEEP_LOG")
		if keep == "" && t.Failed() {
			keep = "../../out/soak-lab-provider.log"
		}
		if keep != "" {
			if err := soakkit.CopyFile(logPath, keep); err == nil {
				t.Logf("provider log kept: %s", keep)
			}
		}
	})
	var env []string
	if lib := os.Getenv("BIGFLEET_LIBVIRT_CLIENT"); lib != "" {
		env = []string{"LD_LIBRARY_PATH=" + lib}
	}
	if !s.p.HA {
		s.states, s.names = []string{filepath.Join(dir, "state.db")}, []string{"provider"}
		s.procs = []*soakkit.Proc{{Bin: bin, Env: env, LogPath: logPath,
			Args: append([]string{"--addr=" + addr, "--metrics-addr=", "--state=" + s.states[0]}, args...),
			Ready: func() error {
				_, err := soakkit.List(s.admin)
				return err
			}}}
		return s.procs[0].Start()
	}
	return s.startReplicas(t, bin, addr, logPath, env, args)
}

// startReplicas starts the apiserver and the HA run's two replicas behind
// the front on addr, and waits for one to lead.
func (s *soak) startReplicas(t *testing.T, bin, addr, logPath string, env, args []string) error {
	kc, stop, err := startKube(t.TempDir())
	if err != nil {
		return err
	}
	t.Cleanup(func() { // the replicas go before the apiserver
		for _, pr := range s.procs {
			pr.Kill()
		}
		stop()
	})
	var backs, metrics []string
	for i, name := range []string{"soaklab-a", "soaklab-b"} {
		a, err := freeAddr()
		if err != nil {
			return err
		}
		m, err := freeAddr()
		if err != nil {
			return err
		}
		backs, metrics = append(backs, a), append(metrics, m)
		s.names, s.states = append(s.names, name), append(s.states, filepath.Join(t.TempDir(), "state.db"))
		own := []string{"--addr=" + a, "--metrics-addr=" + m, "--state=" + s.states[i]}
		s.procs = append(s.procs, &soakkit.Proc{Bin: bin, LogPath: logPath,
			Env:  append([]string{"POD_NAME=" + name}, env...),
			Args: append(append(own, args...), haFlags(kc)...),
			// Serving: /healthz answers (a standby's too; its /readyz is 503).
			Ready: func() error {
				if c := httpStatus(m, "/healthz"); c != http.StatusOK {
					return fmt.Errorf("/healthz: %d", c)
				}
				return nil
			}})
	}
	if s.front, err = newLeaderFront(addr, backs, metrics, s.leads); err != nil {
		return err
	}
	for _, pr := range s.procs {
		if err := pr.Start(); err != nil {
			return err
		}
	}
	i, took, err := s.leaderIdx(-1, haLease+haBound)
	if err != nil {
		return err
	}
	s.logf("HA: %s leads after %s (lease %s/%s/%s, --libvirt-call-timeout=%s)", s.names[i], took.Round(100*time.Millisecond), haLease, haRenew, haRetry, haCall)
	return nil
}

// dial is one caller's connection; it reconnects quickly after a provider
// restart (grpc-go's default backoff grows to two minutes).
func dial(addr string, cfg *tls.Config) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}))
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// dealMachines reads the seeded slots and gives each zone's to the two
// shards in turn.
func (s *soak) dealMachines() error {
	ms, err := soakkit.List(s.admin)
	if err != nil {
		return err
	}
	for id, m := range ms {
		if m.GetInstanceType() == instanceType {
			s.ids = append(s.ids, id)
		}
	}
	slices.Sort(s.ids)
	if len(s.ids) != 4*s.p.PerZone {
		return fmt.Errorf("provider offers %d %s slots, want %d", len(s.ids), instanceType, 4*s.p.PerZone)
	}
	n := map[string]int{}
	for _, id := range s.ids {
		z := ms[id].GetZone()
		s.zone[id], s.domain[id] = z, meta.DomainName(s.p.Provider, id)
		s.owner[id] = s.shards[n[z]%2]
		n[z]++
		s.locks[id] = &sync.Mutex{}
	}
	return nil
}

func (s *soak) lockAll() {
	for _, id := range s.ids {
		s.locks[id].Lock()
	}
}

func (s *soak) unlockAll() {
	for _, id := range s.ids {
		s.locks[id].Unlock()
	}
}

// violate records a violation with its detail (soakkit.Ledger.Explain).
func (s *soak) violate(class, key, what string, m *pb.Machine) {
	detail := s.led.Explain(what, m, s.t0, s.procs[0]) // one log for all
	if s.led.Violate(class, key, detail) {
		s.logf("VIOLATION [%s] %s", class, what)
	}
}

// report prints the violations and the closing line, and fails the test
// on any violation.
func (s *soak) report(t *testing.T) {
	for _, o := range s.led.Unsettled() {
		s.violate(soakkit.ClOther, "unsettled|"+o.OpID, fmt.Sprintf("acknowledged %s of %s (op %s) has no outcome", o.Kind, o.Machine, o.OpID), nil)
	}
	s.logf("operations by outcome: %s", s.led.Outcomes())
	s.logf("fence probes after provider restarts: %d stale tokens refused", s.refused.Load())
	s.logf("hosts fenced by the fence command outside a host-off fault: %d", s.nfenced.Load())
	if s.p.HA {
		s.mu.Lock()
		s.logf("HA: %d failovers (changes of the leading replica); SIGKILL to the standby leading: %v (bound %s)", s.nfailover.Load(), s.takeovers, haBound)
		s.mu.Unlock()
	}
	details := s.led.Details()
	for _, d := range details {
		fmt.Println(d)
	}
	if n := s.led.Count(soakkit.ClOther); n > 0 {
		t.Errorf("soak-lab: %d other violations (listed above as [other])", n)
	}
	nf, byKind := s.led.FaultCounts()
	var counts []string
	for _, c := range classes {
		counts = append(counts, fmt.Sprintf("%s=%d", c, s.led.Count(c)))
	}
	s.logf("wall time %s (seed %d)", time.Since(s.t0).Round(time.Second), s.p.Seed)
	fmt.Printf("soak-lab: %d faults (%s), %d operations (%s), %s\n", nf, byKind, s.led.Acked(), s.led.OpsByKind(),
		strings.Join(counts, " "))
	if s.p.Minutes == 0 && nf < int(s.p.MinFaults) {
		t.Errorf("soak-lab: %d faults, the short run needs at least %d", nf, s.p.MinFaults)
	}
	if len(details) > 0 {
		t.Fail()
	}
}
