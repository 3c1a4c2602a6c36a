package lifecycle

import "context"

// Release is the operator's way out of FAILED (admin API, behind
// --admin-write): it destroys whatever is left of the VM and returns the
// slot to SPECULATIVE through DELETING. BigFleet itself never re-drives a
// FAILED machine; this is not part of its contract.
func (e *Engine) Release(ctx context.Context, id string) (Ack, error) {
	return e.mutate(ctx, id, Token{}, nil, func(m *Machine) decision {
		switch {
		case m.State == Deleting && m.OpKind == OpRelease:
			return retry(m)
		case m.State != Failed:
			return refuse(CodeAborted, "cannot release machine %q: it is %s, only FAILED machines can be released", m.ID, m.State)
		}
		return e.begin(m, OpRelease, Deleting, e.cfg.DeleteTimeout, nil)
	})
}
