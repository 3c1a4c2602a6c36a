package guestagent

import (
	"context"

	"github.com/bigfleet/libvirt-provider/backend"
)

// interrupted is an error of an agent that answered at first and then
// stopped answering part-way through Configure or Drain: most often the
// host's libvirtd froze or restarted under us, not the guest. Its text is
// the cause's; it also matches backend.ErrTransient, so the engine runs the
// (idempotent) transition again within its deadline instead of failing a
// machine that is fine.
type interrupted struct{ error }

func (e interrupted) Unwrap() []error { return []error{e.error, backend.ErrTransient} }

// midProtocol marks err as interrupted when the agent stopped answering
// and the caller still has time; an agent that never answered at all is
// waitAgent's error, which stays final (the guest may not have booted).
func midProtocol(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || !IsAgentUnavailable(err) {
		return err
	}
	return interrupted{err}
}
