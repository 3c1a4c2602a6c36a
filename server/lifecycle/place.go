package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// With a backend that chooses among several hosts of a zone
// (backend.Placer), a Create's host is chosen and recorded with the
// CREATING machine before any libvirt work. A Create resumed after a
// crash then goes back to that host, where its domain may already be,
// instead of being placed again by policy and building a second domain
// elsewhere. The recorded host is given up only on positive evidence that
// nothing was built there: every attempt of this run found the host
// disconnected before asking it anything (backend.ErrNothingDone), or the
// host left the configuration and every other host answered that no
// domain exists (backend.ErrPlacementGone).

// attemptState is what one run's attempts know about each other.
type attemptState struct {
	// resumed: the run began with a host recorded by an earlier run,
	// which may have built there.
	resumed bool
	// reached: an attempt of this run got past the host's connection
	// check, so it may have built there.
	reached bool
}

// create runs one attempt of a Create.
func (e *Engine) create(ctx context.Context, m *record.Machine, st *attemptState) result {
	spec := backend.MachineSpec{
		MachineID: m.ID, OperationID: m.OperationID, Zone: m.Zone,
		InstanceType: m.InstanceType, VCPU: m.VCPU, MemoryMiB: m.MemoryMiB, Marks: e.machineMarks(m.ID),
	}
	pr := e.can.Placer
	placer := pr != nil
	why := ""
	if placer && m.HostName == "" {
		pl, err := pr.Place(spec)
		if err != nil {
			return result{err: err}
		}
		if err := e.recordHost(m, pl.Host, pl.Why); err != nil {
			return result{err: err}
		}
		why = pl.Why
	}
	spec.Host = m.HostName
	p, err := e.be.Create(ctx, spec)
	switch {
	case err == nil:
		if p.Why == "" {
			p.Why = why
		}
		return result{placement: p}
	case !placer:
	case errors.Is(err, backend.ErrPlacementGone):
		err = e.forgetHost(m, pr, err)
	case errors.Is(err, backend.ErrNothingDone) && !st.resumed && !st.reached:
		err = e.forgetHost(m, pr, err)
	default:
		st.reached = true
	}
	return result{err: err}
}

// recordHost writes the host chosen for a CREATING machine into its
// record (and m, the run's copy), before the Create works on it. A zone's
// only unnamed host ("") needs no record: there is nowhere else to go.
func (e *Engine) recordHost(m *record.Machine, host, why string) error {
	if host == m.HostName {
		return nil
	}
	stillCreating := record.Expect{OperationID: m.OperationID, Holds: func(cur *record.Machine) bool { return cur.State == record.Creating }}
	_, err := e.update(m.ID, stillCreating, func(_, n *record.Machine) error {
		n.HostName = host
		if why != "" {
			if h := n.LastTransition(); h != nil {
				h.Note = why
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errStale):
		return errStale
	case err != nil:
		// The booking stays, so the next attempt gets the same host.
		return fmt.Errorf("create: record the chosen host %q: %v: %w", host, err, backend.ErrTransient)
	}
	m.HostName = host
	e.log.Info("create placed", "machine", m.ID, "op", m.OperationID, "host", host, "placement", why)
	return nil
}

// forgetHost gives up a CREATING machine's host, proven never built on,
// so the next attempt places it again; err (transient) says why.
func (e *Engine) forgetHost(m *record.Machine, pr backend.Placer, cause error) error {
	was := m.HostName
	if err := e.recordHost(m, "", ""); err != nil {
		return err
	}
	pr.Unplace(m.Zone, m.ID)
	e.log.Warn("create placed again: its host was never reached", "machine", m.ID, "op", m.OperationID, "host", was, "err", cause)
	return fmt.Errorf("%w (placed again: %w)", cause, backend.ErrTransient)
}
