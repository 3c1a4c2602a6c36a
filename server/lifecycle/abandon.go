package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/resume"
)

// abandonTimeout bounds the cleanup of a Configure cut by a restart.
const abandonTimeout = resume.AbandonTimeout

// abandonConfigure asks the backend to remove what a Configure cut by a
// restart left in the guest (its partial blob, its bootstrap hook, which
// could otherwise still join the node to the cluster) before the machine
// is reported FAILED. Through the call gate, like every backend call on a
// machine; a failure is logged and returned for last_error.
func (e *Engine) abandonConfigure(op record.Machine) error {
	ab := e.can.Abandoner
	if ab == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(e.bgCtx, abandonTimeout)
	defer cancel()
	leave, running, err := e.calls.Enter(ctx, op.ID, record.OpConfigure)
	if err != nil {
		err = fmt.Errorf("the machine's %s call did not return: %w", running, err)
		e.log.Warn("could not clean up after a Configure cut by a restart", "machine", op.ID, "op", op.OperationID, "err", err)
		return err
	}
	defer leave()
	return e.abandonGuest(op, abandonTimeout)
}

// abandonGuest is abandonConfigure's backend call, bounded by within, for
// a caller that holds the machine's call gate.
func (e *Engine) abandonGuest(op record.Machine, within time.Duration) error {
	ab := e.can.Abandoner
	if ab == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(e.bgCtx, within)
	defer cancel()
	err := ab.AbandonConfigure(ctx, op.ID, op.Placement())
	if err != nil {
		e.log.Warn("could not clean up after a Configure cut by a restart", "machine", op.ID, "op", op.OperationID, "err", err)
	}
	return err
}
