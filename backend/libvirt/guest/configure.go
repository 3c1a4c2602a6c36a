package guest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// Configure runs the bootstrap through the guest agent and only then
// records the cluster binding. A failed Configure leaves no binding (one
// left by an earlier attempt is cleared). The blob is never logged.
func (g *Guests) Configure(ctx context.Context, t Target, spec backend.ConfigureSpec) error {
	md, err := g.configurable(ctx, t, spec)
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	if md, err = g.recordIntent(t, md, spec); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	if err := g.bootedFirst(ctx, t); err != nil {
		return err
	}
	start := time.Now()
	if err := g.bootstrapper(t).ConfigureOp(ctx, spec.OperationID, spec.ClusterID, spec.BootstrapBlob); err != nil {
		if md.ClusterID != "" {
			md.ClusterID, md.ShardMetadata = "", nil
			if cerr := g.writeMetadata(t, md); cerr != nil {
				g.cfg.Log.Warn("could not clear a stale binding after a failed configure", "domain", t.Domain, "err", cerr)
			}
		}
		return err // guestagent's errors already say "configure: ..."
	}
	md.OperationID, md.ClusterID, md.ShardMetadata = spec.OperationID, spec.ClusterID, maps.Clone(spec.ShardMetadata)
	md.Configure = meta.ConfigureIntent{} // ended: the binding says it now
	if err := g.writeMetadata(t, md); err != nil {
		return fmt.Errorf("configure: record binding: %w", err)
	}
	g.cfg.Log.Info("domain configured", "domain", t.Domain, "machine", spec.MachineID, "op", spec.OperationID,
		"cluster", spec.ClusterID, "blob_bytes", len(spec.BootstrapBlob), "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// Drain runs the drain hook through the guest agent, then clears the
// binding. A failed drain keeps it: the node may still be in the cluster.
func (g *Guests) Drain(ctx context.Context, t Target, spec backend.DrainSpec) error {
	md, err := g.OwnedRunning(t)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	cluster := spec.ClusterID
	if cluster == "" {
		cluster = md.ClusterID
	}
	if cluster == "" {
		return errors.New("drain: no cluster binding to drain")
	}
	if md, err = g.recordMarks(t, md, spec.Marks); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	start := time.Now()
	if err := g.bootstrapper(t).Drain(ctx, cluster, spec.Grace); err != nil {
		return err
	}
	md.OperationID, md.ClusterID, md.ShardMetadata = spec.OperationID, "", nil
	if err := g.writeMetadata(t, md); err != nil {
		return fmt.Errorf("drain: clear binding: %w", err)
	}
	g.cfg.Log.Info("domain drained", "domain", t.Domain, "machine", spec.MachineID, "op", spec.OperationID,
		"cluster", cluster, "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// Abandon is backend.Abandoner's AbandonConfigure on the located domain:
// a Configure cut by a provider restart leaves its partial blob and maybe
// its bootstrap hook in the guest; they go before the machine is reported
// FAILED.
func (g *Guests) Abandon(ctx context.Context, t Target) error {
	// It runs as the provider starts, when the host may still be on its
	// first connection attempt (a re-probing daemon takes tens of seconds):
	// that attempt is waited for, or the guest would keep the partial blob.
	select {
	case <-t.Host.FirstAttempt():
	case <-ctx.Done():
		return fmt.Errorf("abandon configure: %s: %w", t.Host.Where(), backend.ErrHostConnecting)
	}
	if _, err := g.OwnedRunning(t); err != nil {
		if errors.Is(err, backend.ErrNotRunning) || errors.Is(err, backend.ErrNotFound) {
			return nil // no guest running: nothing of the Configure runs on
		}
		return fmt.Errorf("abandon configure: %w", err)
	}
	if err := g.bootstrapper(t).Abandon(ctx); err != nil {
		return fmt.Errorf("abandon configure: %w", err)
	}
	return nil
}

// Addresses is backend.GuestAddresser's GuestAddresses on the located
// domain: the guest's global addresses through
// guest-network-get-interfaces, over the transport Configure uses and
// bounded by the same per-command timeout. An agent that refuses the
// command (an image limiting qemu-ga's RPCs without allowing it) leaves the
// addresses unknown with one WARN per call; the engine calls it once per
// Configure.
func (g *Guests) Addresses(ctx context.Context, t Target) ([]string, error) {
	addrs, err := g.Client(t).Addresses(ctx)
	if guestagent.IsAgentError(err) {
		g.cfg.Log.Warn("guest agent refused guest-network-get-interfaces; addresses unknown",
			"domain", t.Domain, "machine", t.MachineID, "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("guest addresses: %w", err)
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out, nil
}
