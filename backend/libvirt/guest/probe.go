package guest

import (
	"context"
	"fmt"
	"maps"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
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
	md.Configure = meta.ConfigureIntent{}
	if err := g.writeMetadata(t, md); err != nil {
		return fmt.Errorf("configure: record binding: %w", err)
	}
	g.cfg.Log.Info("domain configured after a restart (its bootstrap hook had finished)", "domain", t.Domain,
		"machine", spec.MachineID, "op", spec.OperationID, "cluster", spec.ClusterID)
	return nil
}

// RollBackConfigure is backend.ConfigureProber's RollBackConfigure on the
// located domain: the intent of the Configure spec.OperationID is
// removed (after the ownership check, on the same handle), the binding
// left as it is (none: a Configure records it only at its end). Another
// operation's intent, or none, is left alone.
func (g *Guests) RollBackConfigure(_ context.Context, t Target, spec backend.ConfigureSpec) error {
	err := t.Host.WithDomain(t.Domain, func(_ virt.Conn, dom virt.Domain) error {
		md, err := meta.ReadOwned(dom, t.Domain, g.cfg.Provider, spec.MachineID)
		if err != nil || md.Configure.OperationID != spec.OperationID {
			return err
		}
		md.Configure = meta.ConfigureIntent{}
		return meta.Write(dom, md)
	})
	if err != nil {
		return fmt.Errorf("roll back configure: clear its intent: %w", err)
	}
	return nil
}
