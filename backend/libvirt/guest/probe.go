package guest

import (
	"context"
	"fmt"
	"maps"

	"github.com/bigfleet/libvirt-provider/backend"
)

// ProbeConfigure is backend.ConfigureProber's ProbeConfigure on the
// located domain: what the guest's bootstrap trace says of the hook of
// the Configure spec.OperationID (guestagent.Bootstrapper.ProbeBootstrap).
// A domain that is gone answers backend.ErrNotFound; one not running, or
// an agent that does not answer, is an error: nobody can tell yet.
func (g *Guests) ProbeConfigure(ctx context.Context, t Target, spec backend.ConfigureSpec) (backend.ConfigureTrace, error) {
	// As Abandon: it runs as the provider starts, maybe before the host's
	// first connection attempt ended.
	select {
	case <-t.Host.FirstAttempt():
	case <-ctx.Done():
		return backend.ConfigureTrace{}, fmt.Errorf("probe configure: %s: %w", t.Host.Where(), backend.ErrHostConnecting)
	}
	if _, err := g.OwnedRunning(t); err != nil {
		return backend.ConfigureTrace{}, fmt.Errorf("probe configure: %w", err)
	}
	tr, err := g.bootstrapper(t).ProbeBootstrap(ctx, spec.OperationID)
	if err != nil {
		return tr, err // guestagent's errors already say "probe bootstrap: ..."
	}
	g.cfg.Log.Info("probed a Configure cut by a restart", "domain", t.Domain, "machine", spec.MachineID,
		"op", spec.OperationID, "bootstrap_hook", tr.Hook.String(), "exit", tr.ExitCode)
	return tr, nil
}

// FinishConfigure is backend.ConfigureProber's FinishConfigure on the
// located domain: after a bootstrap hook that finished ok under a provider
// that was then cut off, it waits for the ready hook and records the
// binding, as Configure would have.
func (g *Guests) FinishConfigure(ctx context.Context, t Target, spec backend.ConfigureSpec) error {
	md, err := g.OwnedRunning(t)
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	if md, err = g.recordMarks(t, md, spec.Marks); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	if err := g.bootstrapper(t).AwaitReady(ctx, spec.ClusterID); err != nil {
		return err // "configure: ..."
	}
	md.OperationID, md.ClusterID, md.ShardMetadata = spec.OperationID, spec.ClusterID, maps.Clone(spec.ShardMetadata)
	if err := g.writeMetadata(t, md); err != nil {
		return fmt.Errorf("configure: record binding: %w", err)
	}
	g.cfg.Log.Info("domain configured after a restart (its bootstrap hook had finished)", "domain", t.Domain,
		"machine", spec.MachineID, "op", spec.OperationID, "cluster", spec.ClusterID)
	return nil
}
