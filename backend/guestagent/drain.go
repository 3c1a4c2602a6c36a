package guestagent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// errNoGrace is why a zero grace period skips the graceful drain.
var errNoGrace = errors.New("grace period is 0: no graceful drain")

// Drain runs "drain <clusterID> <grace seconds>" bounded by grace +
// DrainMargin. If that does not succeed (it hung and was killed, exited
// non-zero, or died by a signal), or grace is 0 ("no grace", never
// "forever"), it escalates to the forced mode "drain --force <clusterID> 0"
// bounded by DrainMargin. Only if the forced mode fails too does Drain return
// an error (the caller then marks the machine FAILED).
//
// An image without a drain hook has nothing to drain: Drain returns nil.
// Drain first kills what an interrupted earlier transition left running
// (guestside.go), and a hook run that must stop is killed with its whole
// process group.
func (b *Bootstrapper) Drain(ctx context.Context, clusterID string, grace time.Duration) error {
	if err := b.waitAgent(ctx); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return midProtocol(ctx, b.drain(ctx, clusterID, grace))
}

// drain is Drain once the agent has answered.
func (b *Bootstrapper) drain(ctx context.Context, clusterID string, grace time.Duration) error {
	if _, err := b.tidy(ctx, false); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	p := b.probe(ctx, b.cfg.DrainHook)
	if p == absent {
		return nil
	}
	cause := errNoGrace
	if grace > 0 {
		argv := []string{b.cfg.DrainHook, "--", clusterID, graceSeconds(grace)}
		res, err := b.runTracked(ctx, hookDrain, argv, grace+b.cfg.DrainMargin)
		switch {
		case missingHook(p, res, err):
			return nil
		case err == nil && res.OK():
			return nil
		case err != nil && (outOfTime(ctx, err) || IsAgentUnavailable(err)):
			// Forcing cannot help when we are out of time or the agent is gone.
			return fmt.Errorf("drain: run drain hook: %w", err)
		case err != nil:
			cause = err
		default:
			cause = res.Err("drain hook")
		}
	}
	if b.cfg.OnEscalate != nil {
		b.cfg.OnEscalate(clusterID, cause)
	}
	return b.forceDrain(ctx, clusterID, cause)
}

// forceDrain runs the forced mode after the graceful one gave up.
func (b *Bootstrapper) forceDrain(ctx context.Context, clusterID string, cause error) error {
	argv := []string{b.cfg.DrainHook, "--force", "--", clusterID, "0"}
	res, err := b.runTracked(ctx, hookDrain, argv, b.cfg.DrainMargin)
	if err == nil && res.OK() {
		return nil
	}
	if err == nil {
		err = res.Err("forced drain hook")
	}
	return fmt.Errorf("drain: forced drain failed too (after: %v): %w", cause, err)
}

// graceSeconds renders grace as whole seconds, rounding up so a sub-second
// grace is not mistaken for "no grace" by the hook.
func graceSeconds(grace time.Duration) string {
	s := int64((grace + time.Second - 1) / time.Second)
	return strconv.FormatInt(s, 10)
}

// outOfTime reports whether err (or ctx) says the caller's time is up.
func outOfTime(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}
