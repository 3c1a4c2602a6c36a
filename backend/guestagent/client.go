package guestagent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// DefaultCommandTimeout bounds every agent command unless WithTimeout says
// otherwise. guest-exec and guest-file-* return at once in qemu-ga (the
// process runs asynchronously), so a long timeout only delays failure
// detection on a dead agent.
const DefaultCommandTimeout = 10 * time.Second

// Client issues typed guest-agent commands over a Transport. It is safe for
// concurrent use if the Transport is; qemu-ga itself serialises commands.
type Client struct {
	t       Transport
	timeout time.Duration
	clock   Clock
}

// Option configures a Client.
type Option func(*Client)

// WithTimeout sets the per-command timeout (values <= 0 are ignored).
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithClock injects the clock used for backoff and budgets.
func WithClock(clk Clock) Option {
	return func(c *Client) {
		if clk != nil {
			c.clock = clk
		}
	}
}

// NewClient returns a Client that sends commands over t.
func NewClient(t Transport, opts ...Option) *Client {
	c := &Client{t: t, timeout: DefaultCommandTimeout, clock: realClock{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Timeout is the per-command timeout in force.
func (c *Client) Timeout() time.Duration { return c.timeout }

// roundTrip sends one command and returns the raw reply. It enforces the
// per-command timeout itself, so a Transport that ignores ctx (a blocking
// cgo call) still cannot hold the caller longer than the timeout; such a
// call finishes in the background and its reply is dropped.
func (c *Client) roundTrip(ctx context.Context, name string, args any) ([]byte, error) {
	req, err := json.Marshal(request{Execute: name, Arguments: args})
	if err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", name, err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	type result struct {
		raw []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		raw, err := c.t.Command(cctx, req, c.timeout)
		done <- result{raw, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, c.transportError(ctx, name, r.err)
		}
		return r.raw, nil
	case <-cctx.Done():
		return nil, c.transportError(ctx, name, cctx.Err())
	}
}

// transportError names the command and classifies the failure: the caller's
// own cancellation, the agent not answering, an agent error, or anything else.
func (c *Client) transportError(ctx context.Context, name string, err error) error {
	var ae *AgentError
	switch {
	case errors.As(err, &ae), errors.Is(err, ErrAgentUnavailable):
		return fmt.Errorf("%s: %w", name, err)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", name, ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: no reply within %s: %w", name, c.timeout, ErrAgentUnavailable)
	default:
		return fmt.Errorf("%s: transport: %w", name, err)
	}
}

// call sends a command and decodes its "return" into out (nil: ignore it).
func (c *Client) call(ctx context.Context, name string, args, out any) error {
	raw, err := c.roundTrip(ctx, name, args)
	if err != nil {
		return err
	}
	if err := decodeReturn(raw, out); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Ping checks that the agent answers (guest-ping).
func (c *Client) Ping(ctx context.Context) error {
	return c.call(ctx, cmdPing, nil, nil)
}

// Sync sends guest-sync with a random id and checks the echo, which flushes
// stale replies a previous, timed-out caller may have left on the channel.
func (c *Client) Sync(ctx context.Context) error {
	id := rand.Int64N(1 << 53) // stays exact through any float-based JSON
	var got int64
	if err := c.call(ctx, cmdSync, syncArgs{ID: id}, &got); err != nil {
		return err
	}
	if got != id {
		return fmt.Errorf("%s: reply id %d, want %d: %w", cmdSync, got, id, errMalformed)
	}
	return nil
}

// FileOpen opens a file in the guest (guest-file-open) and returns its handle.
// Mode is fopen(3)'s ("r", "w", "a", ...). qemu-ga creates new files 0666.
func (c *Client) FileOpen(ctx context.Context, path, mode string) (int64, error) {
	var h int64
	if err := c.call(ctx, cmdFileOpen, fileOpenArgs{Path: path, Mode: mode}, &h); err != nil {
		return 0, err
	}
	return h, nil
}

// FileWrite writes data to an open handle (guest-file-write, base64 on the
// wire) and fails unless the agent reports every byte written. Its errors
// never quote data, even if the transport echoes the request.
func (c *Client) FileWrite(ctx context.Context, handle int64, data []byte) (int, error) {
	b64 := base64.StdEncoding.EncodeToString(data)
	var r fileWriteReply
	if err := c.call(ctx, cmdFileWrite, fileWriteArgs{Handle: handle, BufB64: b64}, &r); err != nil {
		return 0, redactWrite(err, b64, data)
	}
	if r.Count != len(data) {
		return r.Count, fmt.Errorf("%s: short write: %d of %d bytes", cmdFileWrite, r.Count, len(data))
	}
	return r.Count, nil
}

// redactWrite replaces an error message that quotes the request or its
// payload by one that does not.
func redactWrite(err error, b64 string, data []byte) error {
	msg := err.Error()
	leak := strings.Contains(msg, "buf-b64")
	if len(b64) >= 8 && strings.Contains(msg, b64[:min(len(b64), 16)]) {
		leak = true
	}
	if len(data) >= 8 && strings.Contains(msg, string(data[:min(len(data), 16)])) {
		leak = true
	}
	if !leak {
		return err
	}
	class := "transport error"
	if IsAgentUnavailable(err) {
		class = ErrAgentUnavailable.Error()
	} else if IsAgentError(err) {
		class = "agent error"
	}
	return &redactedError{msg: cmdFileWrite + ": " + class + " (message redacted: it quoted the payload)", cause: err}
}

// FileClose closes a handle (guest-file-close).
func (c *Client) FileClose(ctx context.Context, handle int64) error {
	return c.call(ctx, cmdFileClose, handleArgs{Handle: handle}, nil)
}

// Exec starts path with args in the guest (guest-exec): argv is passed as is,
// with no shell in between. It returns the guest pid at once.
func (c *Client) Exec(ctx context.Context, path string, args []string, captureOutput bool) (int64, error) {
	var r execReply
	err := c.call(ctx, cmdExec, execArgs{Path: path, Arg: args, CaptureOutput: captureOutput}, &r)
	if err != nil {
		return 0, err
	}
	return r.PID, nil
}

// ExecStatus reports the state of a process started by Exec
// (guest-exec-status). Once it reports Exited, qemu-ga forgets the pid.
func (c *Client) ExecStatus(ctx context.Context, pid int64) (ExecStatus, error) {
	raw, err := c.roundTrip(ctx, cmdExecStatus, pidArgs{PID: pid})
	if err != nil {
		return ExecStatus{}, err
	}
	st, err := decodeExecStatus(raw)
	if err != nil {
		return ExecStatus{}, fmt.Errorf("%s: %w", cmdExecStatus, err)
	}
	return st, nil
}
