package libvirt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
)

// Delete destroys and undefines the machine's domain and deletes its
// overlay and seed volumes. Every piece may already be gone. A domain with
// the name that is not ours is left alone (backend.ErrNotOurs).
func (b *Backend) Delete(ctx context.Context, spec backend.DeleteSpec) error {
	if spec.MachineID == "" {
		return errors.New("delete: empty machine id")
	}
	b.guests.Forget(spec.MachineID)
	h, name, err := b.loc.locate(spec.MachineID, spec.Placement, spec.Zone)
	switch {
	case errors.Is(err, errHostNotKnown):
		return b.remover.deleteEverywhere(ctx, b.loc, spec)
	case errors.Is(err, backend.ErrHostDown):
		// Its copy is destroyed when the host rejoins (the machine is
		// deleted by then: the fenced rejoin's rule), never started.
		b.log.Warn("delete: the machine's host is declared down; its copy there is destroyed when the host rejoins",
			"zone", h.zone, "host", h.name, "domain", name, "machine", spec.MachineID, "why", err)
	case err != nil:
		return fmt.Errorf("delete: %w", err)
	default:
		if err := b.remover.deleteMachineOn(ctx, h, name, spec); err != nil {
			return err
		}
	}
	// The recorded host's capacity is free now, whatever the other hosts
	// answer: the planner books the machine there only.
	b.loc.plan.Forget(h.zone, spec.MachineID)
	return b.remover.deleteCopiesBeside(ctx, b.loc, h, name, spec)
}

// deleteCopiesBeside removes the machine's domain from the other hosts of
// its zone too: a copy a crash or a cut migration left there (duplicate
// handling keeps a bound one) would otherwise outlive the Delete BigFleet
// saw succeed, a node of a cluster the machine left. Each host removes
// only our own domain of this machine; a stranger's domain of the same
// name there is not a copy: it is left alone.
//
// A host that cannot be reached does not hold the Delete up (issue 38: one
// dead host froze every Delete of its zone): the machine's own copy is
// gone, and a copy on that host, if there is one, is the Delete's
// leftover, which reconcile removes, never adopts, once the host is listed
// again (or the fenced rejoin, for a host declared down). A host that
// answered with any other error fails the Delete, naming it.
func (r *remover) deleteCopiesBeside(ctx context.Context, l *locator, h *host, name string, spec backend.DeleteSpec) error {
	hs, err := l.zoneHosts(h.zone)
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	var errs []error
	for _, o := range hs {
		if _, down := l.down.reason(o.name); o == h || down {
			continue
		}
		err := r.deleteMachineOn(ctx, o, name, spec)
		switch {
		case err == nil || errors.Is(err, backend.ErrNotOurs):
		case backend.IsTransient(err) && ctx.Err() == nil:
			r.log.Warn("delete: another host of the zone is unreachable; a copy there, if any, is removed when it is listed again",
				"zone", o.zone, "host", o.name, "domain", name, "machine", spec.MachineID, "err", err)
		default:
			errs = append(errs, fmt.Errorf("host %s of zone %q may hold a copy of the machine: %w", o.name, o.zone, err))
		}
	}
	return errors.Join(errs...)
}

// deleteEverywhere deletes a machine whose host is not known (it never
// got a placement, and no listing has seen it) on every host of its zone:
// each removes only our own domain of that machine, and a host that
// cannot be reached fails the Delete (it is retried), since the domain
// may be there.
func (r *remover) deleteEverywhere(ctx context.Context, l *locator, spec backend.DeleteSpec) error {
	zone := spec.Placement.Zone
	if zone == "" {
		zone = spec.Zone
	}
	hs, err := l.zoneHosts(zone)
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	name := spec.Placement.Domain
	if name == "" {
		name = meta.DomainName(r.provider, spec.MachineID)
	}
	var errs []error
	for _, h := range hs {
		if _, down := l.down.reason(h.name); down {
			continue // its domains are the fenced rejoin's
		}
		if err := r.deleteMachineOn(ctx, h, name, spec); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		l.plan.Forget(hs[0].zone, spec.MachineID)
	}
	return errors.Join(errs...)
}

// remover removes a machine's domain and volumes from one host, only when
// the domain is ours and this machine's.
type remover struct {
	provider string
	store    volume.Store
	log      *slog.Logger
}

// deleteMachineOn is a Delete's (or Release's) removal of the machine's
// domain and volumes on one host: the domain first records the Delete's
// intent (meta.DeleteIntent), so a provider that lost its state file
// finds a Delete begun, never a machine to adopt.
func (r *remover) deleteMachineOn(ctx context.Context, h *host, name string, spec backend.DeleteSpec) error {
	return r.removeOn(ctx, h, name, spec, true)
}

// deleteOn removes one copy of a machine that is not the machine itself
// (a spare duplicate, the leftover side of a migration, a fenced stale
// copy on a host declared down): no intent is recorded, since the machine
// lives on elsewhere and a copy marked as deleted would make a rebuilt
// provider delete the machine.
func (r *remover) deleteOn(ctx context.Context, h *host, name string, spec backend.DeleteSpec) error {
	return r.removeOn(ctx, h, name, spec, false)
}

// removeOn deletes the machine's domain and volumes on one host.
func (r *remover) removeOn(ctx context.Context, h *host, name string, spec backend.DeleteSpec, intent bool) error {
	start := time.Now()
	err := h.With(func(conn virt.Conn) error {
		gone, err := r.deleteDomain(conn, name, spec, intent)
		if err != nil {
			return err
		}
		// Volumes are named after the domain. Without a domain to prove
		// ownership, only the name derived from this machine is trusted.
		if gone && name != meta.DomainName(r.provider, spec.MachineID) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		if err := r.store.DeleteIn(conn, meta.OverlayName(name)); err != nil {
			return fmt.Errorf("delete: overlay volume: %w", err)
		}
		if err := r.store.DeleteIn(conn, meta.SeedName(name)); err != nil {
			return fmt.Errorf("delete: seed volume: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.log.Info("domain deleted", "zone", h.zone, "host", h.name, "domain", name, "machine", spec.MachineID,
		"op", spec.OperationID, "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// deleteDomain removes our domain; alreadyGone says there was none. With
// intent, the Delete is recorded in the domain's metadata first: a Delete
// cut after that (a provider killed, a host gone dark) is found as such
// by whoever lists the host next, even from an empty state file.
func (r *remover) deleteDomain(conn virt.Conn, name string, spec backend.DeleteSpec, intent bool) (alreadyGone bool, err error) {
	dom, err := conn.LookupDomainByName(name)
	if isNoDomain(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete: look up domain: %w", err)
	}
	defer dom.Free()
	md, err := meta.ReadOwned(dom, name, r.provider, spec.MachineID)
	if err != nil {
		return false, fmt.Errorf("delete: %w", err)
	}
	if intent {
		if err := recordIntent(dom, md, spec.OperationID); err != nil {
			return false, fmt.Errorf("delete: record intent: %w", err)
		}
	}
	return false, destroyAndUndefine(dom)
}

// recordIntent writes the Delete's intent into md on dom. An intent
// already there keeps its first time (the Delete began then) and takes
// the newest operation id (a Release after a failed Delete is that one).
func recordIntent(dom virt.Domain, md meta.Metadata, op string) error {
	if op == "" {
		op = "unknown" // the intent itself is what counts; never write an empty one
	}
	if md.Delete.OperationID == op {
		return nil // a retry of this Delete: recorded already
	}
	since := md.Delete.Since
	if since.IsZero() {
		since = time.Now().UTC()
	}
	md.Delete = meta.DeleteIntent{OperationID: op, Since: since}
	return meta.Write(dom, md)
}

func destroyAndUndefine(dom virt.Domain) error {
	if err := domstate.Destroy(dom); err != nil {
		return fmt.Errorf("delete: destroy domain: %w", err)
	}
	if err := domstate.Undefine(dom); err != nil {
		return fmt.Errorf("delete: undefine domain: %w", err)
	}
	return nil
}

// onDomain looks name up on conn and runs fn on it (used by rollback, whose
// steps outlive the handles of the attempt). A missing domain is done.
func onDomain(conn virt.Conn, name string, fn func(virt.Domain) error) error {
	dom, err := conn.LookupDomainByName(name)
	if isNoDomain(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer dom.Free()
	return fn(dom)
}

// onOwnDomain is onDomain for rollback steps: a domain under the name that
// is not the machine's (a stranger defined it meanwhile, or its metadata
// is damaged) is left alone.
func onOwnDomain(conn virt.Conn, name, provider, machineID string, fn func(virt.Domain) error) error {
	return onDomain(conn, name, func(dom virt.Domain) error {
		if _, err := meta.ReadOwned(dom, name, provider, machineID); err != nil {
			if errors.Is(err, backend.ErrNotOurs) {
				return nil
			}
			return err
		}
		return fn(dom)
	})
}

var _ backend.CopyRemover = (*Backend)(nil)

// RemoveCopy is backend.CopyRemover. The evidence is read afresh, right
// before anything is destroyed: the kept copy must be ours and running on
// its host, and the spare one ours, never bound to a cluster (its
// bootstrap never succeeded, so no node joined from it) and not paused (a
// paused copy is a migration's, left to its recovery). Only then is the
// spare copy's domain and volumes deleted, on its own host.
func (b *Backend) RemoveCopy(ctx context.Context, machineID string, spare, keep backend.Placement) error {
	hs, sname, err := b.loc.locate(machineID, spare, "")
	if err != nil {
		return fmt.Errorf("remove copy: %w", err)
	}
	hk, kname, err := b.loc.locate(machineID, keep, "")
	if err != nil {
		return fmt.Errorf("remove copy: kept copy: %w", err)
	}
	if hs == hk {
		return fmt.Errorf("remove copy: both copies name host %q", hs.name)
	}
	if err := hk.WithDomain(kname, func(_ virt.Conn, dom virt.Domain) error {
		return b.remover.checkKept(dom, kname, machineID)
	}); err != nil {
		return fmt.Errorf("remove copy: kept copy on host %s: %w", hk.name, err)
	}
	if err := hs.WithDomain(sname, func(_ virt.Conn, dom virt.Domain) error {
		return b.remover.checkSpare(dom, sname, machineID)
	}); err != nil {
		return fmt.Errorf("remove copy on host %s: %w", hs.name, err)
	}
	spec := backend.DeleteSpec{MachineID: machineID, OperationID: "reconcile-duplicate", Zone: spare.Zone, Placement: spare}
	if err := b.remover.deleteOn(ctx, hs, sname, spec); err != nil {
		return fmt.Errorf("remove copy on host %s: %w", hs.name, err)
	}
	b.log.Warn("duplicate domain removed", "zone", hs.zone, "host", hs.name, "domain", sname, "machine", machineID, "kept_on", hk.name)
	return nil
}

// errNotSpare: the copy shows no proof that it is not the live machine.
var errNotSpare = errors.New("not provably a spare copy")

func (r *remover) checkKept(dom virt.Domain, name, machineID string) error {
	if _, err := meta.ReadOwned(dom, name, r.provider, machineID); err != nil {
		return err
	}
	st, _, err := dom.GetState()
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if st != libvirt.DOMAIN_RUNNING && st != libvirt.DOMAIN_BLOCKED {
		return fmt.Errorf("it is not running (state %d): %w", st, errNotSpare)
	}
	return nil
}

func (r *remover) checkSpare(dom virt.Domain, name, machineID string) error {
	md, err := meta.ReadOwned(dom, name, r.provider, machineID)
	if err != nil {
		return err
	}
	if md.ClusterID != "" {
		return fmt.Errorf("it is bound to cluster %q: %w", md.ClusterID, errNotSpare)
	}
	st, _, err := dom.GetState()
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if st == libvirt.DOMAIN_PAUSED {
		return fmt.Errorf("it is paused (a migration's copy?): %w", errNotSpare)
	}
	return nil
}
