package guestagent

import (
	"context"
	"time"
)

// Transport sends one guest-agent command (a JSON object
// {"execute":..,"arguments":..}) and returns the raw JSON reply
// ({"return":..} or {"error":{"class":..,"desc":..}}).
//
// The libvirt backend implements it with dom.QemuAgentCommand(cmd,
// timeoutSeconds, 0). Implementations should return an error wrapping
// ErrAgentUnavailable when the agent is not connected or did not answer in
// time, and an *AgentError when the agent (or libvirt for it) reported that
// the command failed. The Client enforces timeout itself as well, so a
// Transport that cannot be interrupted is still bounded.
type Transport interface {
	Command(ctx context.Context, request []byte, timeout time.Duration) ([]byte, error)
}

// TransportFunc adapts a function to Transport.
type TransportFunc func(ctx context.Context, request []byte, timeout time.Duration) ([]byte, error)

// Command calls f.
func (f TransportFunc) Command(ctx context.Context, request []byte, timeout time.Duration) ([]byte, error) {
	return f(ctx, request, timeout)
}

// Clock is the package's view of time, injectable so tests do not sleep.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, returning ctx.Err() in that case.
	Sleep(ctx context.Context, d time.Duration) error
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
