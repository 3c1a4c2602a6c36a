package libvirt

import (
	"fmt"
	"strings"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
)

// Classification happens once, in hostconn (errors.As on libvirt.Error);
// these are the backend's names for it.
var (
	code    = hostconn.Code
	isCode  = hostconn.IsCode
	message = hostconn.Message
)

// mayBeConnLoss reports errors that can mean the connection to the daemon
// is gone. SYSTEM_ERROR also covers local I/O failures, so the caller
// confirms with IsAlive before dropping the connection.
func mayBeConnLoss(err error) bool {
	return isCode(err, libvirt.ERR_SYSTEM_ERROR, libvirt.ERR_RPC, libvirt.ERR_NO_CONNECT,
		libvirt.ERR_INVALID_CONN, libvirt.ERR_OPERATION_TIMEOUT)
}

func isNoDomain(err error) bool { return isCode(err, libvirt.ERR_NO_DOMAIN) }
func isNoVolume(err error) bool { return isCode(err, libvirt.ERR_NO_STORAGE_VOL) }

// isNotRunning: destroying a domain that is already off is not a failure.
func isNotRunning(err error) bool { return isCode(err, libvirt.ERR_OPERATION_INVALID) }

// agentCmdPrefix is how libvirt ≤ 9.x reports an error the agent answered
// with (VIR_ERR_INTERNAL_ERROR); newer releases use AGENT_COMMAND_FAILED.
const agentCmdPrefix = "unable to execute QEMU agent command "

// agentError maps a QemuAgentCommand failure to guestagent's vocabulary:
// the agent not connected, not answering or the domain not running wraps
// ErrAgentUnavailable; an error the agent answered with becomes an
// *AgentError; anything else (a lost connection) is returned as is.
func agentError(err error) error {
	c, ok := code(err)
	if !ok {
		return err
	}
	msg := message(err)
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
