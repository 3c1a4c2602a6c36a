package agentcmd

import (
	"errors"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/guestagent"
)

func TestAgentErrorClassification(t *testing.T) {
	t.Parallel()
	lv := func(c libvirt.ErrorNumber, msg string) error { return libvirt.Error{Code: c, Message: msg} }
	tests := []struct {
		name        string
		err         error
		unavailable bool
		agentDesc   string // non-empty: an *AgentError with this Desc
	}{
		{"not connected", lv(libvirt.ERR_AGENT_UNRESPONSIVE, "Guest agent is not responding: QEMU guest agent is not connected"), true, ""},
		{"command timeout", lv(libvirt.ERR_AGENT_COMMAND_TIMEOUT, "timed out"), true, ""},
		{"unsynced", lv(libvirt.ERR_AGENT_UNSYNCED, "unsynced"), true, ""},
		{"domain off", lv(libvirt.ERR_OPERATION_INVALID, "domain is not running"), true, ""},
		{"agent error (libvirt 9)", lv(libvirt.ERR_INTERNAL_ERROR,
			"internal error: unable to execute QEMU agent command 'guest-file-open': Failed to open file '/x': No such file or directory"),
			false, "Failed to open file '/x': No such file or directory"},
		{"agent error (newer)", lv(libvirt.ERR_AGENT_COMMAND_FAILED, "unable to execute QEMU agent command 'guest-exec': boom"), false, "boom"},
		{"other internal", lv(libvirt.ERR_INTERNAL_ERROR, "something else"), false, ""},
		{"lost connection", lv(libvirt.ERR_RPC, "end of file"), false, ""},
	}
	for _, tc := range tests {
		got := agentError(tc.err)
		if guestagent.IsAgentUnavailable(got) != tc.unavailable {
			t.Errorf("%s: unavailable = %v", tc.name, !tc.unavailable)
		}
		var ae *guestagent.AgentError
		if isAE := errors.As(got, &ae); isAE != (tc.agentDesc != "") || (isAE && ae.Desc != tc.agentDesc) {
			t.Errorf("%s: agent error %v (%+v)", tc.name, isAE, ae)
		}
	}
}
