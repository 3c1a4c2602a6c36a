package lifecycle

import (
	"context"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/resume"
)

// resumeConfigure ends the cut Configure op as its guest tells (package
// resume decides) and records that end.
func (e *Engine) resumeConfigure(op record.Machine) {
	o := resume.Configure(e.bgCtx, resumeView{e}, resume.Config{Prober: e.can.ConfigureProber,
		Timeout: e.cfg.ConfigureTimeout, Retry: e.retryDelay, Log: e.log}, op)
	if e.bgCtx.Err() != nil {
		return // shutting down: the next start asks again
	}
	r := result{rollback: o.Rollback, err: o.Err, addresses: o.Addresses}
	if o.TimedOut {
		r.err = &timeoutError{msg: o.Err.Error()}
	}
	e.finish(op, r)
}

// resumeView is the engine as package resume sees it (resume.Engine).
type resumeView struct{ e *Engine }

func (v resumeView) EnterCall(ctx context.Context, id string, kind record.OpKind) (func(), record.OpKind, error) {
	return v.e.calls.Enter(ctx, id, kind)
}

func (v resumeView) Marks(id string) map[string]backend.FenceMark { return v.e.machineMarks(id) }

func (v resumeView) Addresses(ctx context.Context, id string, pl backend.Placement) []string {
	return v.e.readAddresses(ctx, id, pl)
}

func (v resumeView) Abandon(m record.Machine, within time.Duration) error {
	return v.e.abandonGuest(m, within)
}
