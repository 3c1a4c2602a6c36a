// Package leader elects one acting provider among replicas through a
// Kubernetes coordination.k8s.io/v1 Lease (client-go's leaderelection). It
// has one job: say when this process starts and stops leading, and who
// leads. What a leader or a standby does is the caller's business.
//
// client-go warns that its election alone does not guarantee one actor at
// a time: a leader learns it lost only when its renew deadline passes.
// Config.Validate keeps the caller's longest uninterruptible step inside
// the margin between the renew deadline and the lease's expiry, so a
// leader that stops at OnStopped has stopped before anyone else may lead.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// client-go's defaults (and the chart's).
const (
	DefaultLease = 15 * time.Second
	DefaultRenew = 10 * time.Second
	DefaultRetry = 2 * time.Second
)

// exitMargin is kept free between the end of the caller's longest step and
// the lease's expiry: time to notice (watch's tick), refuse and exit.
const exitMargin = 500 * time.Millisecond

// Config is one candidacy.
type Config struct {
	Namespace, Name string // the Lease
	Identity        string // this candidate (the pod's name)
	Lease           time.Duration
	Renew           time.Duration
	Retry           time.Duration
	// StepBound is the longest step the caller cannot interrupt once
	// started (a libvirt call): it must end before the lease can expire.
	StepBound time.Duration
	// StepFlag names StepBound's flag in Validate's errors.
	StepFlag string
	// Quiet, when set, is told on every look whether this process leads
	// with a renewal younger than MoveAge (quiet.go).
	Quiet  *Quiet
	Logger *slog.Logger
}

// Validate refuses timings that cannot work, naming the flag to change.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Lease <= 0 || c.Renew <= 0 || c.Retry <= 0 {
		bad("--leader-elect-lease, --leader-elect-renew and --leader-elect-retry must be positive (got %s, %s, %s)", c.Lease, c.Renew, c.Retry)
		return errors.Join(errs...)
	}
	if c.Renew >= c.Lease {
		bad("--leader-elect-renew %s must be shorter than --leader-elect-lease %s: the leader must know it lost before another may lead", c.Renew, c.Lease)
	}
	if c.Retry >= c.Renew {
		bad("--leader-elect-retry %s must be shorter than --leader-elect-renew %s: a leader needs more than one try to renew", c.Retry, c.Renew)
	}
	if margin := c.Lease - c.Renew; c.Renew < c.Lease && c.StepBound+exitMargin > margin {
		bad("%s %s does not fit in --leader-elect-lease − --leader-elect-renew = %s (with %s to exit): a leader that lost its lease could still be inside a call when another leads; lower %s or widen the margin",
			c.StepFlag, c.StepBound, margin, exitMargin, c.StepFlag)
	}
	if m := c.MoveAge(); c.Renew < c.Lease && m < 2*c.Retry {
		bad("--leader-elect-lease − --leader-elect-renew = %s is shorter than 2 × --leader-elect-retry %s: the leader goes quiet (no change to a host starts, live migrations are aborted) once the last renewal is older than that margin, and one late renewal would quiet it",
			m, c.Retry)
	}
	if c.Name == "" {
		bad("--leader-elect-lease-name is empty")
	}
	if c.Namespace == "" {
		bad("--leader-elect-namespace is empty (and no in-cluster namespace was found)")
	}
	if c.Identity == "" {
		bad("no identity for leader election: set POD_NAME")
	}
	return errors.Join(errs...)
}

// Callbacks say what happens on a change. OnStarted runs when this process
// becomes the leader; ctx ends when it stops leading. OnStopped runs when
// leading ends, for whatever reason (including never having led when Run's
// ctx ends): it must stop acting at once. OnLeader reports every leader
// seen, this process included.
type Callbacks struct {
	OnStarted func(ctx context.Context)
	OnStopped func()
	OnLeader  func(identity string)
}

// Run campaigns until ctx ends or leadership is lost, and then returns
// (releasing the Lease if held: cancel ctx only once acting has stopped): a
// process that lost the lease must not campaign again with what it still
// holds (it exits and starts afresh as a standby).
func Run(ctx context.Context, cs kubernetes.Interface, c Config, cb Callbacks) error {
	var once sync.Once
	stopped := func() {
		if cb.OnStopped != nil {
			once.Do(cb.OnStopped)
		}
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.Identity},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: c.Lease,
		RenewDeadline: c.Renew,
		RetryPeriod:   c.Retry,
		// The caller cancels ctx only once it has stopped all work, so
		// releasing then hands over at the standby's next retry instead
		// of after a whole lease.
		ReleaseOnCancel: true,
		Name:            c.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: cb.OnStarted,
			OnStoppedLeading: stopped,
			OnNewLeader:      cb.OnLeader,
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	if c.Logger != nil {
		c.Logger.Info("campaigning for leadership", slog.String("lease", c.Namespace+"/"+c.Name),
			slog.String("identity", c.Identity), slog.String("lease_duration", c.Lease.String()),
			slog.String("renew_deadline", c.Renew.String()), slog.String("retry_period", c.Retry.String()))
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go watch(wctx, le, c, stopped)
	le.Run(ctx)
	return nil
}

// watch stops leading the moment the last successful renewal is older
// than the renew deadline. client-go's own renew loop learns it later: a
// try already waiting on the API when the deadline passes runs to its
// request timeout, and each try's deadline starts a retry period after the
// last success (measured: 4.9 s after an apiserver froze, with lease 4 s,
// renew 3 s, retry 0.5 s, i.e. past the lease). This clock is the one the
// margin is computed on: last renewal + renew + a tick. On the same clock
// it tells c.Quiet whether this leader must be quiet.
func watch(ctx context.Context, le *leaderelection.LeaderElector, c Config, stopped func()) {
	t := time.NewTicker(watchTick(c))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c.Quiet != nil {
			c.Quiet.observe(le.IsLeader(), le.Check(c.MoveAge()-c.Lease) == nil, c.MoveAge())
		}
		// Check errs when this process leads and its last observed
		// renewal is older than Lease + (Renew - Lease) = Renew.
		if err := le.Check(c.Renew - c.Lease); err != nil {
			if c.Logger != nil {
				c.Logger.Error("leader: renew deadline passed without a renewal; stopping", slog.String("renew_deadline", c.Renew.String()))
			}
			stopped()
			return
		}
	}
}

// watchTick is how often watch looks: a small part of the margin.
func watchTick(c Config) time.Duration {
	return min(100*time.Millisecond, c.Retry/4)
}

// RESTConfig is the API's address and credentials: --kubeconfig when set,
// else the pod's in-cluster service account.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("--leader-elect outside a cluster needs --kubeconfig: %w", err)
	}
	return cfg, nil
}

// Client builds the clientset. Each API request is bounded by the renew
// deadline's retry period, so one hung request cannot use up the renew
// deadline by itself.
func Client(cfg *rest.Config, c Config) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = c.Renew / 2
	cfg.UserAgent = "bigfleet-libvirt-provider/" + c.Identity
	return kubernetes.NewForConfig(cfg)
}

// InClusterNamespace is the pod's namespace from its service account, or
// "" outside a cluster.
func InClusterNamespace(read func(string) ([]byte, error)) string {
	b, err := read("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return ""
	}
	return string(b)
}

// Term reads the Lease this process has just acquired and returns its
// uid and leaseTransitions: the term this leader's writes carry (the
// split brain's second line, docs/ha.md). A Lease deleted and made again
// has a new uid, so terms of different Leases never compare. An error
// when the Lease does not name this process as its holder: it does not
// lead (any more), and must not act.
func Term(ctx context.Context, cs kubernetes.Interface, c Config) (lease string, n int64, err error) {
	l, err := cs.CoordinationV1().Leases(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		return "", 0, fmt.Errorf("read the leader Lease %s/%s: %w", c.Namespace, c.Name, err)
	}
	if h := l.Spec.HolderIdentity; h == nil || *h != c.Identity {
		return "", 0, fmt.Errorf("the leader Lease %s/%s is held by %q, not %q", c.Namespace, c.Name, deref(l.Spec.HolderIdentity), c.Identity)
	}
	if l.Spec.LeaseTransitions != nil {
		n = int64(*l.Spec.LeaseTransitions)
	}
	return string(l.UID), n, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
