package libvirt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

var _ backend.Confirmer = (*Backend)(nil)

// ConfirmGone looks the machine's domain up by name: gone is true only
// when libvirt answers that no such domain exists. Any other outcome (the
// domain is there, whoever's it is; the host is down; the lookup failed or
// did not answer within the inventory timeout) is not a confirmation, so a
// machine is never declared vanished from an error.
func (b *Backend) ConfirmGone(ctx context.Context, machineID string, pl backend.Placement) (bool, error) {
	h, name, err := b.loc.locate(machineID, pl, pl.Zone)
	if errors.Is(err, errHostNotKnown) {
		return b.loc.confirmEverywhere(ctx, machineID, pl)
	}
	if err != nil {
		return false, fmt.Errorf("confirm gone: %w", err)
	}
	return b.loc.confirmOn(ctx, h, name)
}

// confirmEverywhere: gone only when every host of the zone answers that
// the domain does not exist.
func (l *locator) confirmEverywhere(ctx context.Context, machineID string, pl backend.Placement) (bool, error) {
	hs, err := l.zoneHosts(pl.Zone)
	if err != nil {
		return false, fmt.Errorf("confirm gone: %w", err)
	}
	name := pl.Domain
	if name == "" {
		name = meta.DomainName(l.cfg.Provider, machineID)
	}
	for _, h := range hs {
		gone, err := l.confirmOn(ctx, h, name)
		if err != nil || !gone {
			return false, err
		}
	}
	return true, nil
}

// confirmOn looks the domain up on one host.
func (l *locator) confirmOn(ctx context.Context, h *host, name string) (bool, error) {
	// Reconcile confirms machine after machine: once one lookup hangs (a
	// frozen daemon), the next ones fail at once instead of each waiting
	// out the timeout.
	if h.confirming.Load() > 0 {
		return false, fmt.Errorf("confirm gone: an earlier lookup on zone %q has not returned: %w", h.zone, backend.ErrHostUnavailable)
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.InventoryTimeout)
	defer cancel()
	type answer struct {
		gone bool
		err  error
	}
	done := make(chan answer, 1)
	h.confirming.Add(1)
	go func() { // a libvirt call cannot be interrupted; a late answer is dropped
		err := h.WithDomain(name, func(virt.Conn, virt.Domain) error { return nil })
		// Not deferred: the count must drop before the answer is sent, or
		// the caller's next lookup can find this one still counted.
		h.confirming.Add(-1)
		switch {
		case isNoDomain(err):
			done <- answer{gone: true}
		case err != nil:
			done <- answer{err: fmt.Errorf("confirm gone: look up %s: %w", name, err)}
		default:
			done <- answer{}
		}
	}()
	select {
	case a := <-done:
		return a.gone, a.err
	case <-ctx.Done():
		return false, fmt.Errorf("confirm gone: look up %s: no answer within %s: %w",
			name, l.cfg.InventoryTimeout.Round(time.Millisecond), ctx.Err())
	}
}
