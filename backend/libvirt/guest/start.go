package guest

import (
	"context"
	"errors"
	"fmt"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// Start starts the located domain again after it stopped behind our back
// (virsh destroy, a QEMU killed or crashed, the guest powered off). It is
// idempotent: a domain that is already active (running, paused, shutting
// down) is left as it is and reported as success. The domain must be
// ours; a stranger's is never started.
func (g *Guests) Start(ctx context.Context, t Target) error {
	_, started, _, err := g.startAgain(ctx, t)
	if err != nil {
		return err
	}
	g.cfg.Log.Info("domain started again", "zone", t.Zone, "domain", t.Domain, "machine", t.MachineID)
	if g.cfg.WaitBooted && started {
		g.WatchBoot(t) // "booting" until its booted check passes
	}
	return nil
}

// startAgain is Start's one lookup: it checks the domain is ours, starts
// it unless it is active and waits until it runs, then reads its state.
// It returns the domain's metadata, whether this call started it, and
// notRunning's verdict on the state it left (Start ignores it; a
// Configure needs a running guest). Ownership is read in the same lookup
// as the start, so a Configure that starts a stopped domain reads it
// twice (OwnedRunning, then here) and not again before its binding.
func (g *Guests) startAgain(ctx context.Context, t Target) (md meta.Metadata, started bool, running, err error) {
	h, name, machineID := t.Host, t.Domain, t.MachineID
	var st libvirt.DomainState
	var reason int
	err = h.WithDomain(name, func(_ virt.Conn, dom virt.Domain) error {
		var err error
		if md, err = meta.ReadOwned(dom, name, g.cfg.Provider, machineID); err != nil {
			return err
		}
		active, err := dom.IsActive()
		if err != nil {
			return fmt.Errorf("state: %w", err)
		}
		if !active {
			started = true
			if err := dom.Create(); err != nil {
				return h.ExplainStart(name, fmt.Errorf("start domain: %w", err))
			}
			if err := h.ExplainStart(name, domstate.WaitRunning(ctx, dom)); err != nil {
				return err
			}
		}
		if st, reason, err = dom.GetState(); err != nil {
			return fmt.Errorf("state of %s: %w", name, err)
		}
		return nil
	})
	if isNoDomain(err) {
		return md, started, nil, fmt.Errorf("start: domain %s: %w", name, backend.ErrNotFound)
	}
	if err != nil {
		return md, started, nil, fmt.Errorf("start: %s: %w", name, h.Scrub(err))
	}
	return md, started, notRunning(name, st, reason), nil
}

// configurable reads the metadata of the machine a Configure binds. Its
// domain may be shut off or crashed (the host rebooted, QEMU was killed):
// the machine is IDLE, which BigFleet counts as warm capacity, and the
// next reconcile would start it again. So the Configure starts it itself
// and then waits for the boot (bootedFirst), instead of failing a machine
// that is fine. A paused domain is an operator's or libvirt's decision and
// fails at once, as OwnedRunning says.
func (g *Guests) configurable(ctx context.Context, t Target, spec backend.ConfigureSpec) (meta.Metadata, error) {
	md, err := g.OwnedRunning(t)
	var stopped *stoppedError
	if !errors.As(err, &stopped) || !stopped.rs.Inactive() {
		return md, err
	}
	if !spec.MayStart {
		g.cfg.Log.Warn("configure: the domain is not running and is not started: another host may run the guest", "domain", t.Domain,
			"machine", spec.MachineID, "was", stopped.rs.String(), "why", spec.WhyNotStart)
		return md, errors.Join(err, spec.WhyNotStart)
	}
	g.cfg.Log.Warn("configure: the domain was not running; starting it again", "domain", t.Domain,
		"machine", spec.MachineID, "was", stopped.rs.String())
	md, _, running, err := g.startAgain(ctx, t)
	if err != nil {
		return md, err
	}
	// No WatchBoot: the Configure waits for the boot itself (bootedFirst).
	g.cfg.Log.Info("domain started again", "zone", t.Zone, "domain", t.Domain, "machine", t.MachineID)
	return md, running
}

// notRunning is nil for a running domain, otherwise a *stoppedError with
// its state, wrapping backend.ErrNotRunning; a domain paused in passage
// (starting up, migrating) is transient as well, so Configure and Drain
// run again within their deadline instead of failing a machine that is
// fine (a provider crash mid-start or mid-migration leaves one for
// reconcile to finish).
func notRunning(name string, st libvirt.DomainState, reason int) error {
	rs := domstate.Run(st, reason)
	switch {
	case domstate.InPassage(st, reason):
		return &stoppedError{name: name, rs: rs, transient: true}
	case !rs.Up():
		return &stoppedError{name: name, rs: rs}
	}
	return nil
}

// stoppedError is a domain that does not run, with its state.
type stoppedError struct {
	name      string
	rs        backend.RunState
	transient bool
}

func (e *stoppedError) Error() string {
	if e.transient {
		return fmt.Sprintf("domain %s is %s: %v (%v)", e.name, e.rs, backend.ErrNotRunning, backend.ErrTransient)
	}
	return fmt.Sprintf("domain %s is %s: %v", e.name, e.rs, backend.ErrNotRunning)
}

func (e *stoppedError) Unwrap() []error {
	if e.transient {
		return []error{backend.ErrNotRunning, backend.ErrTransient}
	}
	return []error{backend.ErrNotRunning}
}

// OwnedRunning reads the metadata of our machine's domain, for the
// operations that talk to the guest agent (Configure, Drain): in the same
// lookup, a domain that is not
// running (shut off, crashed, paused, ...) fails at once, wrapping
// backend.ErrNotRunning with its state; one paused in passage (starting
// up, migrating) is transient too. Waiting out the agent's timeout
// for a guest that cannot answer only delays that answer (2 min for a
// Drain) and hides its cause.
func (g *Guests) OwnedRunning(t Target) (meta.Metadata, error) {
	h, name, machineID := t.Host, t.Domain, t.MachineID
	var md meta.Metadata
	var st libvirt.DomainState
	var reason int
	err := h.WithDomain(name, func(_ virt.Conn, dom virt.Domain) error {
		var err error
		if md, err = meta.ReadOwned(dom, name, g.cfg.Provider, machineID); err != nil {
			return err
		}
		if st, reason, err = dom.GetState(); err != nil {
			return fmt.Errorf("state of %s: %w", name, err)
		}
		return nil
	})
	if isNoDomain(err) {
		return meta.Metadata{}, fmt.Errorf("domain %s: %w", name, backend.ErrNotFound)
	}
	if err != nil {
		return md, err
	}
	return md, notRunning(name, st, reason)
}

func isNoDomain(err error) bool { return virt.IsCode(err, libvirt.ERR_NO_DOMAIN) }
