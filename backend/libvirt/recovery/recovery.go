// Package recovery decides, from libvirt's state of each copy alone,
// which copy of a machine an interrupted live migration left is the
// machine, whether it must be resumed, and which copies are the
// migration's leftovers (the backend's RecoverMigration reads the copies
// and carries the plan out). It needs no Backend.
package recovery

import (
	"errors"
	"fmt"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
)

// Copy is one copy of the machine as read just before the decision.
type Copy struct {
	Host     string // the host it is on, as placements name it
	State    libvirt.DomainState
	Reason   int
	Job      bool // a libvirt job (a migration still under way) is active
	Recorded bool // on the host the machine's record names
}

func (c Copy) up() bool {
	return c.State == libvirt.DOMAIN_RUNNING || c.State == libvirt.DOMAIN_BLOCKED
}

// migrationLeftover: a copy a migration left behind: paused by it (the
// source after the copy; an incoming destination that was never resumed,
// "starting up" on some releases) or shut off as migrated.
func (c Copy) migrationLeftover() bool {
	switch c.State {
	case libvirt.DOMAIN_PAUSED:
		return c.Reason == int(libvirt.DOMAIN_PAUSED_MIGRATION) || c.Reason == int(libvirt.DOMAIN_PAUSED_STARTING_UP)
	case libvirt.DOMAIN_SHUTOFF:
		return c.Reason == int(libvirt.DOMAIN_SHUTOFF_MIGRATED)
	}
	return false
}

func (c Copy) String() string {
	return fmt.Sprintf("host %s: %s", c.Host, domstate.Run(c.State, c.Reason))
}

// Plan: which copy is the machine (Live, an index of the copies), whether
// it must be resumed, and which copies go.
type Plan struct {
	Live   int
	Resume bool
	Remove []int
}

// ErrUndecided: nothing may change.
var ErrUndecided = errors.New("libvirt's state does not prove which copy is the machine; nothing changed")

// Decide is the decision, from the copies' states only. A copy
// that runs is the machine (the guest's state moved there, or never
// left); with none running, the recorded copy paused by the migration is
// (the destination never ran the guest). Every other copy must be a
// migration's leftover to be removed.
func Decide(cs []Copy) (Plan, error) {
	p, rec := Plan{Live: -1}, -1
	for i, c := range cs {
		if c.Job {
			return p, fmt.Errorf("a job is still active on %s: %w", c, ErrUndecided)
		}
		if c.up() {
			if p.Live >= 0 {
				return p, fmt.Errorf("two copies run (%s, %s): %w", cs[p.Live], c, ErrUndecided)
			}
			p.Live = i
		}
		if c.Recorded {
			rec = i
		}
	}
	if p.Live < 0 {
		if rec < 0 || cs[rec].State != libvirt.DOMAIN_PAUSED || cs[rec].Reason != int(libvirt.DOMAIN_PAUSED_MIGRATION) {
			return p, fmt.Errorf("no copy runs and the recorded host's copy is not paused by a migration: %w", ErrUndecided)
		}
		p.Live, p.Resume = rec, true
	}
	for i, c := range cs {
		if i == p.Live {
			continue
		}
		if !c.migrationLeftover() {
			return p, fmt.Errorf("the copy on %s is not a migration's leftover: %w", c, ErrUndecided)
		}
		p.Remove = append(p.Remove, i)
	}
	return p, nil
}
