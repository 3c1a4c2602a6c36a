package libvirt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/agentcmd"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// agentClient talks to the domain's guest agent over libvirt (or the
// tests' transport), each command bounded by --agent-timeout.
func (b *Backend) agentClient(h *host, name string) *guestagent.Client {
	var t guestagent.Transport = agentcmd.Transport{Host: h.Host, Domain: name}
	if b.transport != nil {
		t = b.transport(h, name)
	}
	return guestagent.NewClient(t, guestagent.WithTimeout(b.cfg.AgentTimeout))
}

func (b *Backend) bootstrapper(h *host, name string) *guestagent.Bootstrapper {
	c := b.agentClient(h, name)
	cfg := b.cfg.Bootstrap
	if cfg.OnEscalate == nil {
		cfg.OnEscalate = func(cluster string, cause error) {
			b.log.Warn("graceful drain gave up; forcing", "domain", name, "cluster", cluster, "why", cause)
		}
	}
	return guestagent.NewBootstrapper(c, cfg)
}

// setBinding writes md, after checking again that the domain is still ours.
func (b *Backend) setBinding(h *host, name string, md meta.Metadata) error {
	return h.WithDomain(name, func(_ virt.Conn, dom virt.Domain) error {
		if _, err := meta.ReadOwned(dom, name, b.cfg.Provider, md.MachineID); err != nil {
			return err
		}
		return meta.Write(dom, md)
	})
}

// recordMarks merges a transition's fence marks into md and, when they
// move any stored mark, writes them (the binding unchanged) before the
// transition's work: a Configure or Drain that then fails still leaves
// the newer token on the host, so a provider rebuilt from the hosts after
// losing its state never accepts an older one. Every later write of md
// records them too.
func (b *Backend) recordMarks(h *host, name string, md meta.Metadata, marks map[string]backend.FenceMark) (meta.Metadata, error) {
	merged := meta.MergeMarks(md.Marks, marks)
	if maps.Equal(merged, md.Marks) {
		return md, nil
	}
	md.Marks = merged
	if err := b.setBinding(h, name, md); err != nil {
		return md, fmt.Errorf("record fence marks: %w", err)
	}
	return md, nil
}

// Configure runs the bootstrap through the guest agent and only then
// records the cluster binding. A failed Configure leaves no binding (one
// left by an earlier attempt is cleared). The blob is never logged.
func (b *Backend) Configure(ctx context.Context, spec backend.ConfigureSpec) error {
	h, name, err := b.locate(spec.MachineID, spec.Placement, "")
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	md, err := b.configurable(ctx, h, name, spec)
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	if md, err = b.recordMarks(h, name, md, spec.Marks); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	if err := b.bootedFirst(ctx, h, name, spec.MachineID); err != nil {
		return err
	}
	start := time.Now()
	if err := b.bootstrapper(h, name).Configure(ctx, spec.ClusterID, spec.BootstrapBlob); err != nil {
		if md.ClusterID != "" {
			md.ClusterID, md.ShardMetadata = "", nil
			if cerr := b.setBinding(h, name, md); cerr != nil {
				b.log.Warn("could not clear a stale binding after a failed configure", "domain", name, "err", cerr)
			}
		}
		return err // guestagent's errors already say "configure: ..."
	}
	md.OperationID, md.ClusterID, md.ShardMetadata = spec.OperationID, spec.ClusterID, maps.Clone(spec.ShardMetadata)
	if err := b.setBinding(h, name, md); err != nil {
		return fmt.Errorf("configure: record binding: %w", err)
	}
	b.log.Info("domain configured", "domain", name, "machine", spec.MachineID, "op", spec.OperationID,
		"cluster", spec.ClusterID, "blob_bytes", len(spec.BootstrapBlob), "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// configurable reads the metadata of the machine a Configure binds. Its
// domain may be shut off or crashed (the host rebooted, QEMU was killed):
// the machine is IDLE, which BigFleet counts as warm capacity, and the
// next reconcile would start it again. So the Configure starts it itself
// and then waits for the boot (bootedFirst), instead of failing a machine
// that is fine. A paused domain is an operator's or libvirt's decision and
// fails at once, as ownedRunning says.
func (b *Backend) configurable(ctx context.Context, h *host, name string, spec backend.ConfigureSpec) (meta.Metadata, error) {
	md, err := b.ownedRunning(h, name, spec.MachineID)
	var stopped *stoppedError
	if !errors.As(err, &stopped) || !stopped.rs.Inactive() {
		return md, err
	}
	if !spec.MayStart {
		b.log.Warn("configure: the domain is not running and is not started: another host may run the guest", "domain", name,
			"machine", spec.MachineID, "was", stopped.rs.String(), "why", spec.WhyNotStart)
		return md, errors.Join(err, spec.WhyNotStart)
	}
	b.log.Warn("configure: the domain was not running; starting it again", "domain", name,
		"machine", spec.MachineID, "was", stopped.rs.String())
	if err := b.startOn(ctx, h, name, spec.MachineID); err != nil {
		return md, err
	}
	return b.ownedRunning(h, name, spec.MachineID)
}

// Drain runs the drain hook through the guest agent, then clears the
// binding. A failed drain keeps it: the node may still be in the cluster.
func (b *Backend) Drain(ctx context.Context, spec backend.DrainSpec) error {
	h, name, err := b.locate(spec.MachineID, spec.Placement, "")
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	md, err := b.ownedRunning(h, name, spec.MachineID)
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
	if md, err = b.recordMarks(h, name, md, spec.Marks); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	start := time.Now()
	if err := b.bootstrapper(h, name).Drain(ctx, cluster, spec.Grace); err != nil {
		return err
	}
	md.OperationID, md.ClusterID, md.ShardMetadata = spec.OperationID, "", nil
	if err := b.setBinding(h, name, md); err != nil {
		return fmt.Errorf("drain: clear binding: %w", err)
	}
	b.log.Info("domain drained", "domain", name, "machine", spec.MachineID, "op", spec.OperationID,
		"cluster", cluster, "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// AgentClient returns a guest-agent client for a machine's domain over the
// same transport Configure and Drain use (for diagnostics, admin tools and
// integration tests). Each command looks the domain up afresh.
func (b *Backend) AgentClient(pl backend.Placement) (*guestagent.Client, error) {
	h, err := b.hostOf("", pl.Zone, pl.Host)
	if err != nil {
		return nil, err
	}
	if pl.Domain == "" {
		return nil, errors.New("agent client: placement has no domain")
	}
	return guestagent.NewClient(agentcmd.Transport{Host: h.Host, Domain: pl.Domain}, guestagent.WithTimeout(b.cfg.AgentTimeout)), nil
}

// AbandonConfigure is backend.Abandoner: a Configure cut by a provider
// restart leaves its partial blob and maybe its bootstrap hook in the
// guest; they go before the machine is reported FAILED.
func (b *Backend) AbandonConfigure(ctx context.Context, machineID string, pl backend.Placement) error {
	h, name, err := b.locate(machineID, pl, "")
	if err != nil {
		return fmt.Errorf("abandon configure: %w", err)
	}
	// It runs as the provider starts, when the host may still be on its
	// first connection attempt (a re-probing daemon takes tens of seconds):
	// that attempt is waited for, or the guest would keep the partial blob.
	select {
	case <-h.FirstAttempt():
	case <-ctx.Done():
		return fmt.Errorf("abandon configure: %s: %w", h.Where(), backend.ErrHostConnecting)
	}
	if _, err := b.ownedRunning(h, name, machineID); err != nil {
		if errors.Is(err, backend.ErrNotRunning) || errors.Is(err, backend.ErrNotFound) {
			return nil // no guest running: nothing of the Configure runs on
		}
		return fmt.Errorf("abandon configure: %w", err)
	}
	if err := b.bootstrapper(h, name).Abandon(ctx); err != nil {
		return fmt.Errorf("abandon configure: %w", err)
	}
	return nil
}

// GuestAddresses is backend.GuestAddresser: the guest's global addresses
// through guest-network-get-interfaces, over the transport Configure uses and
// bounded by the same per-command timeout. An agent that refuses the command
// (an image limiting qemu-ga's RPCs without allowing it) leaves the addresses
// unknown with one WARN per call; the engine calls it once per Configure.
func (b *Backend) GuestAddresses(ctx context.Context, machineID string, pl backend.Placement) ([]string, error) {
	h, name, err := b.locate(machineID, pl, "")
	if err != nil {
		return nil, fmt.Errorf("guest addresses: %w", err)
	}
	addrs, err := b.agentClient(h, name).Addresses(ctx)
	if guestagent.IsAgentError(err) {
		b.log.Warn("guest agent refused guest-network-get-interfaces; addresses unknown",
			"domain", name, "machine", machineID, "err", err)
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
