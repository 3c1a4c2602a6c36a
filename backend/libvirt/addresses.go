package libvirt

import (
	"context"
	"fmt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
)

// GuestAddresses is backend.GuestAddresser: the guest's global addresses
// through guest-network-get-interfaces, over the transport Configure uses and
// bounded by the same per-command timeout. An agent that refuses the command
// (an image limiting qemu-ga's RPCs without allowing it) leaves the addresses
// unknown with one WARN per call; the engine calls it once per Configure.
func (b *Backend) GuestAddresses(ctx context.Context, machineID string, pl backend.Placement) ([]string, error) {
	h, name, err := b.locate(machineID, pl, "")
	if err != nil {
		return nil, fmt.Errorf("guest addresses: %w", err)
	}
	var t guestagent.Transport = agentTransport{h: h, name: name}
	if b.transport != nil {
		t = b.transport(h, name)
	}
	c := guestagent.NewClient(t, guestagent.WithTimeout(b.cfg.AgentTimeout))
	addrs, err := c.Addresses(ctx)
	if guestagent.IsAgentError(err) {
		b.log.Warn("guest agent refused guest-network-get-interfaces; addresses unknown",
			"domain", name, "machine", machineID, "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("guest addresses: %w", err)
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out, nil
}
