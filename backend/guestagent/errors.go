package guestagent

import (
	"errors"
	"strings"
)

// ErrAgentUnavailable marks "the agent did not answer": the per-command
// timeout expired, or the transport reports the channel is not connected.
// A Transport should wrap it (or context.DeadlineExceeded) for those cases so
// callers can tell a dead or absent agent from a command that failed.
var ErrAgentUnavailable = errors.New("guest agent not responding")

// AgentError is an error the agent itself answered with ({"error":{...}}).
// A Transport whose substrate reports agent errors out of band (libvirt's
// QemuAgentCommand does) should return an *AgentError for them too.
type AgentError struct {
	Class string // e.g. "GenericError", "CommandNotFound"
	Desc  string
}

func (e *AgentError) Error() string {
	if e.Class == "" {
		return "agent error: " + e.Desc
	}
	return "agent error " + e.Class + ": " + e.Desc
}

// IsAgentUnavailable reports whether err means the agent did not answer.
func IsAgentUnavailable(err error) bool { return errors.Is(err, ErrAgentUnavailable) }

// IsAgentError reports whether err carries an error the agent answered with.
func IsAgentError(err error) bool {
	var ae *AgentError
	return errors.As(err, &ae)
}

// looksMissing reports whether an agent error says a path does not exist.
// qemu-ga words it "No such file or directory" (g_spawn and open(2) alike);
// other agents and libvirt may say "not found" or ENOENT.
func looksMissing(err error) bool {
	if err == nil || IsAgentUnavailable(err) {
		return false
	}
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"no such file", "enoent", "not found"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// redactedError hides a message that might quote secret input (a transport
// that echoes its request would otherwise leak the blob) while keeping its
// classification for errors.Is.
type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }

func (e *redactedError) Is(target error) bool { return errors.Is(e.cause, target) }

func (e *redactedError) As(target any) bool {
	// Only the agent's class is safe to expose; its text is redacted.
	var ae *AgentError
	if t, ok := target.(**AgentError); ok && errors.As(e.cause, &ae) {
		*t = &AgentError{Class: ae.Class, Desc: "(redacted)"}
		return true
	}
	return false
}

// unavailableError is an ErrAgentUnavailable with its own wording.
type unavailableError struct {
	msg   string
	cause error
}

func (e *unavailableError) Error() string { return e.msg }

func (e *unavailableError) Unwrap() []error { return []error{ErrAgentUnavailable, e.cause} }
