package libvirt

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

// A host declared down (backend.HostDownDeclarer) is one the operator
// says is off or fenced for sure. From then on: no placement goes there;
// no call is made on its domains except DestroyFenced; a Delete of a
// machine there completes without it (its copy is destroyed when the host
// rejoins); its listing counts as listed with nothing running
// (ZoneInventory.Down), and what it holds if it answers again is handed
// up as Fenced copies, never as the machine. The declaration lives in
// memory here; the admin service persists it and applies it at start.

var (
	_ backend.HostDownDeclarer = (*Backend)(nil)
	_ backend.FencedDestroyer  = (*Backend)(nil)
)

// downHosts are the hosts declared down, with the reason given.
type downHosts struct {
	mu  sync.Mutex
	why map[string]string // by host name
}

func (d *downHosts) reason(name string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	why, ok := d.why[name]
	return why, ok
}

func (d *downHosts) set(name string, down bool, why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.why == nil {
		d.why = map[string]string{}
	}
	if down {
		d.why[name] = why
	} else {
		delete(d.why, name)
	}
}

// SetDown is backend.HostDownDeclarer.
func (b *Backend) SetDown(name string, down bool, reason string) error {
	h := b.loc.hosts[name]
	if h == nil {
		return fmt.Errorf("host %q: %w", name, backend.ErrUnknownHost)
	}
	if down && reason == "" {
		return errors.New("declaring a host down needs a reason")
	}
	b.loc.down.set(name, down, reason)
	b.loc.plan.Update(name, func(p *placement.Host) { p.Down = down })
	if down {
		b.log.Warn("host declared down: no placement, no call on its domains; its machines elsewhere go on",
			"host", name, "zone", h.zone, "reason", reason)
	} else {
		b.log.Warn("host declaration of down ended: its listing counts again", "host", name, "zone", h.zone)
	}
	return nil
}

// isDown returns the error of a call to a host declared down (nil when
// it is not), wrapping backend.ErrHostDown.
func (l *locator) isDown(h *host) error {
	why, down := l.down.reason(h.name)
	if !down {
		return nil
	}
	return fmt.Errorf("host %s/%s declared down: %s: %w", h.zone, h.name, why, backend.ErrHostDown)
}

// ready is h's readiness for the accept path: a host declared down is
// "ready" (calls on it are answered at once: a Delete completes without
// it, others fail naming the declaration), never a reason to refuse a
// whole zone or wait for it.
func (l *locator) ready(h *host) error {
	if _, down := l.down.reason(h.name); down {
		return nil
	}
	return h.Ready()
}

// DestroyFenced is backend.FencedDestroyer: the fenced rejoin's removal
// of a stale copy on a host still declared down. The domain is destroyed
// and undefined and its volumes deleted, only if it is ours and this
// machine's (deleteOn's ownership check); it is never started.
func (b *Backend) DestroyFenced(ctx context.Context, machineID string, pl backend.Placement) error {
	h := b.loc.hosts[pl.Host]
	if h == nil || h.zone != pl.Zone {
		return fmt.Errorf("destroy fenced copy: host %q of zone %q: %w", pl.Host, pl.Zone, backend.ErrUnknownHost)
	}
	if b.loc.isDown(h) == nil {
		return fmt.Errorf("destroy fenced copy: host %s is not declared down: a Delete removes its domains", h.name)
	}
	name := pl.Domain
	if name == "" {
		name = meta.DomainName(b.cfg.Provider, machineID)
	}
	spec := backend.DeleteSpec{MachineID: machineID, OperationID: "fenced-rejoin", Zone: pl.Zone, Placement: pl}
	if err := b.remover.deleteOn(ctx, h, name, spec); err != nil {
		return fmt.Errorf("destroy fenced copy on host %s: %w", h.name, err)
	}
	b.log.Warn("fenced rejoin: a stale copy on a host declared down destroyed", "zone", h.zone, "host", h.name,
		"domain", name, "machine", machineID)
	return nil
}
