package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/bigfleet/libvirt-provider/server"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/intents"
	"github.com/bigfleet/libvirt-provider/server/leader"
)

// leaderFlags are --leader-elect and its settings (issue 41, docs/ha.md).
type leaderFlags struct {
	LeaderElect          bool          // --leader-elect
	LeaderElectLease     time.Duration // --leader-elect-lease
	LeaderElectRenew     time.Duration // --leader-elect-renew
	LeaderElectRetry     time.Duration // --leader-elect-retry
	LeaderElectLeaseName string        // --leader-elect-lease-name
	LeaderElectNamespace string        // --leader-elect-namespace
	Kubeconfig           string        // --kubeconfig
}

// defaultLeaseName is the Lease's name when the chart does not set one
// from its release.
const defaultLeaseName = "bigfleet-libvirt-provider"

func addLeaderFlags(fs *flag.FlagSet, c *leaderFlags) {
	fs.BoolVar(&c.LeaderElect, "leader-elect", false, "run as one of several replicas: only the holder of a Kubernetes Lease acts; the others are standbys that answer Unavailable naming the leader and are not ready (docs/ha.md)")
	fs.DurationVar(&c.LeaderElectLease, "leader-elect-lease", leader.DefaultLease, "with --leader-elect: how long a Lease holds without renewal before a standby may take it")
	fs.DurationVar(&c.LeaderElectRenew, "leader-elect-renew", leader.DefaultRenew, "with --leader-elect: how long the leader keeps trying to renew before it stops acting and exits; shorter than --leader-elect-lease by more than --libvirt-call-timeout")
	fs.DurationVar(&c.LeaderElectRetry, "leader-elect-retry", leader.DefaultRetry, "with --leader-elect: how often candidates try to take or renew the Lease")
	fs.StringVar(&c.LeaderElectLeaseName, "leader-elect-lease-name", defaultLeaseName, "with --leader-elect: the Lease's `name` (the chart uses its release's)")
	fs.StringVar(&c.LeaderElectNamespace, "leader-elect-namespace", "", "with --leader-elect: the Lease's `namespace` (default: POD_NAMESPACE, else the pod's own, else default)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "with --leader-elect: kubeconfig `file` for the Kubernetes API (default: the pod's in-cluster service account)")
}

// validateLeader refuses leader-election settings that cannot work,
// naming the flag; without --leader-elect its flags must keep their
// defaults (a setting that does nothing is a mistake).
func (c *config) validateLeader() []error {
	if !c.LeaderElect {
		if c.Kubeconfig != "" || c.LeaderElectNamespace != "" {
			return []error{errors.New("--kubeconfig and --leader-elect-namespace need --leader-elect")}
		}
		return nil
	}
	if err := c.leaderConfig(nil).Validate(); err != nil {
		return []error{err}
	}
	return nil
}

// leaderConfig is the candidacy the flags describe. The identity is the
// pod's name (POD_NAME, from the downward API), else the host name.
func (c *config) leaderConfig(log *slog.Logger) leader.Config {
	return leader.Config{
		Namespace: c.leaseNamespace(), Name: c.LeaderElectLeaseName, Identity: identity(),
		Lease: c.LeaderElectLease, Renew: c.LeaderElectRenew, Retry: c.LeaderElectRetry,
		StepBound: c.LibvirtCallTimeout, StepFlag: "--libvirt-call-timeout", Logger: log,
	}
}

func (c *config) leaseNamespace() string {
	if c.LeaderElectNamespace != "" {
		return c.LeaderElectNamespace
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if ns := strings.TrimSpace(leader.InClusterNamespace(os.ReadFile)); ns != "" {
		return ns
	}
	return "default"
}

func identity() string {
	if id := os.Getenv("POD_NAME"); id != "" {
		return id
	}
	h, _ := os.Hostname()
	return h
}

// setAsideState moves a standby's state file, and the admin cordon and
// down files beside it, out of the way: a process under --leader-elect
// always starts as a standby, so whatever they hold is from an earlier
// term and stale. Once leading, the engine starts from the shared journal
// (takeover.go) and what the hosts hold (the state-loss path). Each file
// is kept as FILE.previous-term for inspection.
func setAsideState(path string, log *slog.Logger) error {
	if path == "" {
		return nil
	}
	for _, f := range []string{path, admin.CordonFileFor(path), admin.DownFileFor(path)} {
		if _, err := os.Stat(f); errors.Is(err, os.ErrNotExist) {
			continue
		}
		old := f + ".previous-term"
		if err := os.Rename(f, old); err != nil {
			return fmt.Errorf("--state %s: set aside a stale term's %s: %w", path, f, err)
		}
		log.Warn("leader election: a state file is from an earlier term; set aside, the leader starts from the shared journal and the hosts",
			slog.String("file", f), slog.String("kept_as", old))
	}
	return nil
}

// election is the daemon's leader-election side: it opens the gate once
// the engine acts, and on a lost lease stops everything at once.
type election struct {
	d      *daemon
	gate   *server.Gate
	cfg    leader.Config
	client kubernetes.Interface
	lost   chan error // one value: the lease was lost while leading
	// journal is the shared journal's ConfigMap; shared its store, once
	// this replica has taken over (takeover.go).
	journal *intents.Journal
	shared  atomic.Pointer[intents.Store]

	work      context.Context // ends when the lease is lost (workContext)
	abortWork context.CancelFunc
	cancel    context.CancelFunc // ends the candidacy (resign)
	done      chan struct{}      // closed when the candidacy has ended

	mu      sync.Mutex // orders lead's start against stopLeading
	leading bool
}

// newElection is the candidacy's state, with its API client (a bad
// --kubeconfig stops the process before anything is bound); campaign
// starts it.
func newElection(ctx context.Context, d *daemon) (*election, error) {
	e := &election{d: d, gate: server.NewGate(identity()), lost: make(chan error, 1), done: make(chan struct{})}
	e.cfg = d.cfg.leaderConfig(d.log.With(slog.String("component", "leader")))
	e.cfg.Quiet = leader.NewQuiet()
	rc, err := leader.RESTConfig(d.cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if e.client, err = leader.Client(rc, e.cfg); err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	if err := e.newJournal(ctx, rc); err != nil {
		return nil, err
	}
	e.work, e.abortWork = context.WithCancel(context.WithoutCancel(ctx))
	return e, nil
}

// registerLeaderGauge exports leader_acting: 1 while this replica acts,
// 0 on a standby or a leader that is stopping. Across the replicas of one
// release, its sum is the number of actors: 1, or 0 during a failover.
func (e *election) registerLeaderGauge(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leader_acting",
		Help: "1 while this replica holds the leader Lease and acts, 0 otherwise (--leader-elect).",
	}, func() float64 {
		if e.gate.Acting() {
			return 1
		}
		return 0
	}))
}

// campaign starts campaigning in the background. The candidacy outlives
// ctx (SIGTERM): a leader keeps renewing while its graceful shutdown lets
// transitions finish, and resigns after.
func (d *daemon) campaign(ctx context.Context) {
	e := d.election
	var ectx context.Context
	ectx, e.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(e.done)
		_ = leader.Run(ectx, e.client, e.cfg, leader.Callbacks{
			OnStarted: func(context.Context) { e.lead(ctx) },
			OnStopped: func() { e.stopLeading(ectx) },
			OnLeader:  e.onLeader,
		})
	}()
}

// lead takes over the shared journal, builds and starts the engine (its
// first listing rebuilds the machines from the hosts) and then opens the
// gate. base is the daemon's context: the engine outlives the leadership
// callback's. A takeover that fails (the journal unreadable or claimed
// by another) leaves the gate shut and ends the process, naming why:
// acting without the journal would lose what the old leader accepted.
func (e *election) lead(base context.Context) {
	start := time.Now()
	if !e.takeTerm(base) {
		return
	}
	e.mu.Lock()
	if e.gate.Stopped() {
		e.mu.Unlock()
		return
	}
	e.leading = true
	e.d.log.Info("leader: starting the engine from the shared journal and what the hosts hold")
	eng, err := e.d.takeOver(e.work)
	if err != nil {
		e.gate.Stop()
		e.leading = false // stopLeading has nothing more to stop
		e.abortWork()
		e.mu.Unlock()
		select {
		case e.lost <- fmt.Errorf("leader: cannot take over: %w; exiting so Kubernetes restarts this pod as a standby", err):
		default: // already on its way out
		}
		return
	}
	eng.Start(context.WithoutCancel(base))
	e.mu.Unlock()
	waitFirstListing(base, eng, e.d.log)
	e.d.hostGauges.Refresh()
	if e.gate.Open() {
		e.d.log.Info("leader: acting", slog.String("took", time.Since(start).Round(time.Millisecond).String()))
	}
}

// stopLeading runs when leading ends. After resign (ectx ended) all work
// has stopped already. Otherwise the lease was lost, and the lease may
// expire lease − renew from now: refuse every call at once, cancel the
// work in flight (each transition stops at its next step and stays
// transitional, for the next leader to resume from what the hosts hold;
// a libvirt call already running ends within --libvirt-call-timeout,
// which validateLeader keeps inside that margin), and hand waitAndShutdown
// the cause: it closes the listeners and the process exits non-zero.
func (e *election) stopLeading(ectx context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gate.Stop()
	if !e.leading || ectx.Err() != nil {
		return
	}
	if eng := e.d.engPtr.Load(); eng != nil {
		eng.StopAccepting()
	}
	e.abortWork()
	select {
	case e.lost <- errors.New("lost the leader lease (renew deadline passed): stopped acting; exiting so Kubernetes restarts this pod as a standby"):
	default: // stepped down already (haterm.go)
	}
}

func (e *election) onLeader(id string) {
	e.gate.SetLeader(id)
	e.d.log.Info("leader elected", slog.String("leader", id), slog.Bool("self", id == identity()))
}

// lostChan is nil (never ready) without --leader-elect.
func (d *daemon) lostChan() <-chan error {
	if d.election == nil {
		return nil
	}
	return d.election.lost
}

// workContext is the parent of the shutdown's bound on in-flight work:
// under --leader-elect it ends the moment the lease is lost, so a graceful
// shutdown that outlives the lease cancels its transitions at once.
func (d *daemon) workContext(ctx context.Context) context.Context {
	if d.election == nil {
		return context.WithoutCancel(ctx)
	}
	return d.election.work
}

// resign ends the candidacy once the leader has stopped all work,
// releasing the Lease (a standby takes it at its next retry instead of
// waiting for it to expire). It waits for the election to end, briefly.
func (d *daemon) resign() {
	e := d.election
	if e == nil {
		return
	}
	e.cancel()
	select {
	case <-e.done:
	case <-time.After(resignWait):
		d.log.Warn("leader election: lease not released in time; it expires by itself", slog.String("waited", resignWait.String()))
	}
}

// resignWait bounds the release of the Lease on the way out.
const resignWait = 3 * time.Second
