package libvirt

import (
	"context"
	"errors"
	"fmt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/agentcmd"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/guest"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// The guest's operations live in backend/libvirt/guest; the backend
// locates the machine once and hands the located domain down.

var (
	_ backend.Starter         = (*Backend)(nil)
	_ backend.BootReporter    = (*Backend)(nil)
	_ backend.ConfigureProber = (*Backend)(nil)
	_ backend.LeaderTermer    = (*Backend)(nil)
	_ backend.ChangeGater     = (*Backend)(nil)
)

// Configure runs the bootstrap through the guest agent and only then
// records the cluster binding (guest.Guests.Configure).
func (b *Backend) Configure(ctx context.Context, spec backend.ConfigureSpec) error {
	t, err := b.loc.locateGuest(spec.MachineID, spec.Placement, "")
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	return b.guests.Configure(ctx, t, spec)
}

// Drain runs the drain hook through the guest agent, then clears the
// binding (guest.Guests.Drain).
func (b *Backend) Drain(ctx context.Context, spec backend.DrainSpec) error {
	t, err := b.loc.locateGuest(spec.MachineID, spec.Placement, "")
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return b.guests.Drain(ctx, t, spec)
}

// Start starts the machine's domain again after it stopped behind our back
// (guest.Guests.Start).
func (b *Backend) Start(ctx context.Context, machineID string, pl backend.Placement) error {
	t, err := b.loc.locateGuest(machineID, pl, pl.Zone)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	return b.guests.Start(ctx, t)
}

// AbandonConfigure is backend.Abandoner (guest.Guests.Abandon).
func (b *Backend) AbandonConfigure(ctx context.Context, machineID string, pl backend.Placement) error {
	t, err := b.loc.locateGuest(machineID, pl, "")
	if err != nil {
		return fmt.Errorf("abandon configure: %w", err)
	}
	return b.guests.Abandon(ctx, t)
}

// ProbeConfigure is backend.ConfigureProber (guest.Guests.ProbeConfigure).
func (b *Backend) ProbeConfigure(ctx context.Context, spec backend.ConfigureSpec) (backend.ConfigureTrace, error) {
	t, err := b.loc.locateGuest(spec.MachineID, spec.Placement, "")
	if err != nil {
		return backend.ConfigureTrace{}, fmt.Errorf("probe configure: %w", err)
	}
	return b.guests.ProbeConfigure(ctx, t, spec)
}

// FinishConfigure is backend.ConfigureProber (guest.Guests.FinishConfigure).
func (b *Backend) FinishConfigure(ctx context.Context, spec backend.ConfigureSpec) error {
	t, err := b.loc.locateGuest(spec.MachineID, spec.Placement, "")
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	return b.guests.FinishConfigure(ctx, t, spec)
}

// RollBackConfigure is backend.ConfigureProber (guest.Guests.RollBackConfigure).
func (b *Backend) RollBackConfigure(ctx context.Context, spec backend.ConfigureSpec) error {
	t, err := b.loc.locateGuest(spec.MachineID, spec.Placement, "")
	if err != nil {
		return fmt.Errorf("roll back configure: %w", err)
	}
	return b.guests.RollBackConfigure(ctx, t, spec)
}

// GuestAddresses is backend.GuestAddresser (guest.Guests.Addresses).
func (b *Backend) GuestAddresses(ctx context.Context, machineID string, pl backend.Placement) ([]string, error) {
	t, err := b.loc.locateGuest(machineID, pl, "")
	if err != nil {
		return nil, fmt.Errorf("guest addresses: %w", err)
	}
	return b.guests.Addresses(ctx, t)
}

// BootStatus is backend.BootReporter.
func (b *Backend) BootStatus(machineID string) (backend.BootStatus, bool) {
	return b.guests.Status(machineID)
}

// AgentClient returns a guest-agent client for a machine's domain over the
// same transport Configure and Drain use (for diagnostics, admin tools and
// integration tests). Each command looks the domain up afresh.
func (b *Backend) AgentClient(pl backend.Placement) (*guestagent.Client, error) {
	h, err := b.loc.hostOf("", pl.Zone, pl.Host)
	if err != nil {
		return nil, err
	}
	if pl.Domain == "" {
		return nil, errors.New("agent client: placement has no domain")
	}
	return guestagent.NewClient(agentcmd.Transport{Host: h.Host, Domain: pl.Domain}, guestagent.WithTimeout(b.cfg.AgentTimeout)), nil
}

// locateGuest is locate's answer as the guest operations take it (built
// here, so a Configure's path leaves this file once).
func (l *locator) locateGuest(machineID string, pl backend.Placement, zone string) (guest.Target, error) {
	h, name, err := l.locate(machineID, pl, zone)
	if err != nil {
		return guest.Target{}, err
	}
	return guest.Target{Host: h.Host, Zone: h.zone, Domain: name, MachineID: machineID}, nil
}

// guest is the domain name of machineID on h, as the guest operations
// take it.
func (h *host) guest(name, machineID string) guest.Target {
	return guest.Target{Host: h.Host, Zone: h.zone, Domain: name, MachineID: machineID}
}

// SetLeaderTerm is backend.LeaderTermer: from now on every domain this
// backend writes carries t, and one that carries a newer term of t's
// Lease is never changed (meta.SetTerm).
func (b *Backend) SetLeaderTerm(t backend.LeaderTerm, onNewer func(found backend.LeaderTerm)) {
	meta.SetTerm(b.cfg.Provider, t, onNewer)
}
