package guestagent

import (
	"context"
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/internal/backoff"
)

// Defaults of the image contract (docs/image-contract.md).
const (
	DefaultBlobPath      = "/opt/bigfleet/bootstrap.blob"
	DefaultBootstrapHook = "/opt/bigfleet/bootstrap"
	DefaultReadyHook     = "/opt/bigfleet/ready"
	DefaultDrainHook     = "/opt/bigfleet/drain"

	DefaultAgentWait       = 2 * time.Minute
	DefaultBootstrapBudget = 10 * time.Minute
	DefaultReadyBudget     = 30 * time.Second
	DefaultReadyPollStart  = 50 * time.Millisecond
	DefaultReadyPollMax    = time.Second
	DefaultDrainMargin     = 30 * time.Second
)

// BootstrapConfig tunes a Bootstrapper; zero fields take the defaults above.
type BootstrapConfig struct {
	BlobPath      string
	BootstrapHook string
	ReadyHook     string
	DrainHook     string
	RunDir        string // the hooks' pid records, in the guest (a tmpfs)
	ChunkSize     int    // raw bytes per guest-file-write

	AgentWait       time.Duration // how long to wait for the agent's first ping
	BootstrapBudget time.Duration // one run of the bootstrap hook
	ReadyBudget     time.Duration // one run of the ready hook
	ReadyPollStart  time.Duration // first pause between ready checks
	ReadyPollMax    time.Duration // cap of that pause
	DrainMargin     time.Duration // added to grace; also the forced drain's budget

	// OnEscalate, if set, hears why a graceful drain was abandoned for the
	// forced mode, so the caller can log it (a forced drain that succeeds
	// returns nil).
	OnEscalate func(clusterID string, cause error)
}

func (c *BootstrapConfig) setDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	dur := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.BlobPath, DefaultBlobPath)
	def(&c.BootstrapHook, DefaultBootstrapHook)
	def(&c.ReadyHook, DefaultReadyHook)
	def(&c.DrainHook, DefaultDrainHook)
	def(&c.RunDir, DefaultRunDir)
	dur(&c.AgentWait, DefaultAgentWait)
	dur(&c.BootstrapBudget, DefaultBootstrapBudget)
	dur(&c.ReadyBudget, DefaultReadyBudget)
	dur(&c.ReadyPollStart, DefaultReadyPollStart)
	dur(&c.ReadyPollMax, DefaultReadyPollMax)
	dur(&c.DrainMargin, DefaultDrainMargin)
}

// Bootstrapper runs Configure and Drain through the guest agent.
type Bootstrapper struct {
	c   *Client
	cfg BootstrapConfig
}

// NewBootstrapper returns a Bootstrapper that talks through c.
func NewBootstrapper(c *Client, cfg BootstrapConfig) *Bootstrapper {
	cfg.setDefaults()
	return &Bootstrapper{c: c, cfg: cfg}
}

// Config returns the configuration in force, defaults filled in.
func (b *Bootstrapper) Config() BootstrapConfig { return b.cfg }

// Configure delivers blob to BlobPath, runs "bootstrap <clusterID>" and then
// waits until "ready <clusterID>" exits 0 (or ctx ends). Without a ready hook
// in the image the bootstrap hook's success is the readiness signal.
//
// It first kills what an interrupted earlier attempt left running and
// removes its partial blob (guestside.go). The blob is written to a 0600
// file in a private directory and renamed to BlobPath once complete, so
// BlobPath never holds a partial blob and no byte of it is ever readable by
// anyone but root. A Configure that gives up cleans up the same way.
//
// The blob is secret: it is only handed to WriteFile and never appears in an
// error. Configure is safe to re-run: the hooks must be idempotent.
func (b *Bootstrapper) Configure(ctx context.Context, clusterID string, blob []byte) error {
	return b.ConfigureOp(ctx, "", clusterID, blob)
}

// ConfigureOp is Configure for the operation op: its bootstrap hook leaves
// a trace in the guest, keyed by op, that ProbeBootstrap reads after the
// provider was cut off (trace.go). An empty op leaves no trace.
func (b *Bootstrapper) ConfigureOp(ctx context.Context, op, clusterID string, blob []byte) error {
	if op != "" {
		if err := checkOp(op); err != nil {
			return fmt.Errorf("configure: %w", err)
		}
	}
	if err := checkBlobPath(b.cfg.BlobPath); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	if err := b.waitAgent(ctx); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	err := b.configure(ctx, op, clusterID, blob)
	if err != nil {
		b.giveUp(ctx, err)
	}
	return midProtocol(ctx, err)
}

// configure is Configure once the agent has answered.
func (b *Bootstrapper) configure(ctx context.Context, op, clusterID string, blob []byte) error {
	if err := b.deliver(ctx, blob); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	// What the hooks print may echo the blob; it is redacted before it
	// can reach last_error, a log line or the admin API.
	forms := newSecretForms(blob)
	argv := []string{b.cfg.BootstrapHook, "--", clusterID}
	res, err := b.runBootstrap(ctx, op, argv)
	if err != nil {
		return fmt.Errorf("configure: run bootstrap hook: %w", err)
	}
	if err := forms.redactResult(res).Err("bootstrap hook"); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	if err := b.awaitReady(ctx, clusterID, forms.redactResult); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	return nil
}

// deliver tidies, writes blob into the fresh 0600 file tidy created and
// renames it to BlobPath.
func (b *Bootstrapper) deliver(ctx context.Context, blob []byte) error {
	tmp, err := b.tidy(ctx, true)
	if err != nil {
		return err
	}
	if err := b.c.WriteFile(ctx, tmp, blob, b.cfg.ChunkSize); err != nil {
		return fmt.Errorf("write blob: %w", err)
	}
	return b.publish(ctx)
}

// waitAgent bounds WaitReady by AgentWait so a guest without an agent fails
// with a clear message instead of eating the whole transition timeout. When
// the caller's deadline comes sooner than AgentWait (a short transition
// timeout), the wait ends a little before it (a tenth of what is left, at
// most 5 s), so the failure still says the agent never answered rather than
// only that the transition timed out.
func (b *Bootstrapper) waitAgent(ctx context.Context) error {
	wait := b.cfg.AgentWait
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left > 0 {
			wait = min(wait, left-min(left/10, 5*time.Second))
		}
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := b.c.WaitReady(wctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("wait for guest agent: %w", ctx.Err())
		}
		return err
	}
	return nil
}

// awaitReady polls the ready hook with backoff until it exits 0.
func (b *Bootstrapper) awaitReady(ctx context.Context, clusterID string, redact func(HookResult) HookResult) error {
	present := b.probe(ctx, b.cfg.ReadyHook)
	if present == absent {
		return nil
	}
	argv := []string{b.cfg.ReadyHook, "--", clusterID}
	delay := backoff.New(b.cfg.ReadyPollStart, b.cfg.ReadyPollMax)
	var last error
	checks := 0
	for {
		checks++
		res, err := b.runTracked(ctx, hookReady, argv, b.cfg.ReadyBudget)
		if missingHook(present, res, err) {
			return nil
		}
		if err == nil && res.OK() {
			return nil
		}
		if last = err; err == nil {
			last = redact(res).Err("ready hook")
		}
		if ctx.Err() != nil || b.c.clock.Sleep(ctx, delay.Next()) != nil {
			break
		}
	}
	return fmt.Errorf("node did not become ready (%d checks, %v): %w", checks, ctx.Err(), last)
}

// presence is what a file-open probe learned about a hook path.
type presence int

const (
	unknown presence = iota
	present
	absent
)

// probe checks whether path exists in the guest by opening it read-only.
// Anything but a clear "no such file" leaves it unknown, and the exec decides.
func (b *Bootstrapper) probe(ctx context.Context, path string) presence {
	h, err := b.c.FileOpen(ctx, path, "r")
	if err == nil {
		_ = b.c.FileClose(context.WithoutCancel(ctx), h)
		return present
	}
	if looksMissing(err) {
		return absent
	}
	return unknown
}

// missingHook reports whether a hook run failed only because the hook is not
// in the image: qemu-ga's spawn fails with "No such file or directory", or
// (older agents that fork first, or a wrapper) the child exits 127. Exit 127
// from a hook the probe saw is the hook's own failure.
func missingHook(p presence, res HookResult, err error) bool {
	if p == present {
		return false
	}
	if err != nil {
		return looksMissing(err)
	}
	return res.Exited && res.ExitCode == 127
}
