package libvirt

import (
	"context"
	"errors"
	"fmt"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
)

var _ backend.CopyRemover = (*Backend)(nil)

// RemoveCopy is backend.CopyRemover. The evidence is read afresh, right
// before anything is destroyed: the kept copy must be ours and running on
// its host, and the spare one ours, never bound to a cluster (its
// bootstrap never succeeded, so no node joined from it) and not paused (a
// paused copy is a migration's, left to its recovery). Only then is the
// spare copy's domain and volumes deleted, on its own host.
func (b *Backend) RemoveCopy(ctx context.Context, machineID string, spare, keep backend.Placement) error {
	hs, sname, err := b.locate(machineID, spare, "")
	if err != nil {
		return fmt.Errorf("remove copy: %w", err)
	}
	hk, kname, err := b.locate(machineID, keep, "")
	if err != nil {
		return fmt.Errorf("remove copy: kept copy: %w", err)
	}
	if hs == hk {
		return fmt.Errorf("remove copy: both copies name host %q", hs.name)
	}
	if err := hk.WithDomain(kname, func(_ hostconn.Conn, dom hostconn.Domain) error {
		return b.checkKept(dom, kname, machineID)
	}); err != nil {
		return fmt.Errorf("remove copy: kept copy on host %s: %w", hk.name, err)
	}
	if err := hs.WithDomain(sname, func(_ hostconn.Conn, dom hostconn.Domain) error {
		return b.checkSpare(dom, sname, machineID)
	}); err != nil {
		return fmt.Errorf("remove copy on host %s: %w", hs.name, err)
	}
	spec := backend.DeleteSpec{MachineID: machineID, OperationID: "reconcile-duplicate", Zone: spare.Zone, Placement: spare}
	if err := b.deleteOn(ctx, hs, sname, spec); err != nil {
		return fmt.Errorf("remove copy on host %s: %w", hs.name, err)
	}
	b.log.Warn("duplicate domain removed", "zone", hs.zone, "host", hs.name, "domain", sname, "machine", machineID, "kept_on", hk.name)
	return nil
}

// errNotSpare: the copy shows no proof that it is not the live machine.
var errNotSpare = errors.New("not provably a spare copy")

func (b *Backend) checkKept(dom hostconn.Domain, name, machineID string) error {
	if _, err := b.owned(dom, name, machineID); err != nil {
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

func (b *Backend) checkSpare(dom hostconn.Domain, name, machineID string) error {
	md, err := b.owned(dom, name, machineID)
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
