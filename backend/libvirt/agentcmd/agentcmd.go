// Package agentcmd carries the guest agent's protocol over libvirt:
// Transport is a guestagent.Transport that sends each command through
// virDomainQemuAgentCommand on one host's connection, and maps libvirt's
// errors to guestagent's vocabulary (the agent unavailable, or an error
// the agent answered with). It needs no Backend.
package agentcmd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// Transport is guestagent.Transport over virDomainQemuAgentCommand, to
// the domain named Domain on Host.
//
// Each command takes its own connection reference and domain handle and
// frees them when libvirt returns. guestagent.Client gives up waiting at its
// timeout while the cgo call may still run; handles shared with the caller
// could then be freed under it.
type Transport struct {
	Host   *hostconn.Host
	Domain string
}

// Command sends one request; libvirt bounds it by timeout (whole seconds,
// at least one).
func (t Transport) Command(_ context.Context, req []byte, timeout time.Duration) ([]byte, error) {
	secs := int((timeout + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	var reply string
	err := t.Host.WithDomain(t.Domain, func(_ virt.Conn, dom virt.Domain) error {
		var err error
		reply, err = dom.QemuAgentCommand(string(req), libvirt.DomainQemuAgentCommandTimeout(secs), 0)
		return err
	})
	if err != nil {
		if virt.IsCode(err, libvirt.ERR_NO_DOMAIN) {
			return nil, fmt.Errorf("domain %s is gone: %w", t.Domain, guestagent.ErrAgentUnavailable)
		}
		return nil, agentError(t.Host.Scrub(err))
	}
	return []byte(reply), nil
}

// agentCmdPrefix is how libvirt ≤ 9.x reports an error the agent answered
// with (VIR_ERR_INTERNAL_ERROR); newer releases use AGENT_COMMAND_FAILED.
const agentCmdPrefix = "unable to execute QEMU agent command "

// agentError maps a QemuAgentCommand failure to guestagent's vocabulary:
// the agent not connected, not answering or the domain not running wraps
// ErrAgentUnavailable; an error the agent answered with becomes an
// *AgentError; anything else (a lost connection) is returned as is.
func agentError(err error) error {
	c, ok := virt.Code(err)
	if !ok {
		return err
	}
	msg := virt.Message(err)
	switch c {
	case libvirt.ERR_AGENT_UNRESPONSIVE, libvirt.ERR_AGENT_COMMAND_TIMEOUT, libvirt.ERR_AGENT_UNSYNCED,
		libvirt.ERR_OPERATION_TIMEOUT, libvirt.ERR_OPERATION_INVALID:
		return fmt.Errorf("libvirt: %s: %w", msg, guestagent.ErrAgentUnavailable)
	case libvirt.ERR_AGENT_COMMAND_FAILED:
		return &guestagent.AgentError{Desc: agentDesc(msg)}
	case libvirt.ERR_INTERNAL_ERROR:
		if strings.Contains(msg, agentCmdPrefix) {
			return &guestagent.AgentError{Desc: agentDesc(msg)}
		}
	}
	return err
}

// agentDesc keeps the agent's own words from libvirt's
// "internal error: unable to execute QEMU agent command 'x': <desc>".
func agentDesc(msg string) string {
	if i := strings.Index(msg, agentCmdPrefix); i >= 0 {
		rest := msg[i+len(agentCmdPrefix):]
		if j := strings.Index(rest, "': "); j >= 0 {
			return rest[j+3:]
		}
	}
	return msg
}
