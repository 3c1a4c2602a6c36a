package guestagent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Status polling: start fast because most hooks finish in well under a
// second, then back off so a long hook costs few agent round trips.
const (
	pollStart  = 20 * time.Millisecond
	pollMax    = 500 * time.Millisecond
	killBinary = "/bin/kill"
)

// HookResult is how a hook run ended. Exactly one of Exited, Signaled and
// TimedOut is true. Output is only known when the process ended by itself.
type HookResult struct {
	Argv         []string
	PID          int64
	Exited       bool // ended by exit(2); ExitCode is valid
	ExitCode     int
	Signaled     bool // killed by a signal; Signal is valid
	Signal       int
	TimedOut     bool // outlived Budget and was sent SIGKILL
	Budget       time.Duration
	Elapsed      time.Duration
	Stdout       []byte
	Stderr       []byte
	OutTruncated bool
	ErrTruncated bool
}

// OK reports whether the hook exited with status 0.
func (r HookResult) OK() bool { return r.Exited && r.ExitCode == 0 }

// Err describes a failed run as a *HookError naming the hook (nil if OK).
func (r HookResult) Err(name string) error {
	if r.OK() {
		return nil
	}
	tail := Tail(r.Stderr, DefaultTailBytes)
	if tail == "" {
		tail = Tail(r.Stdout, DefaultTailBytes)
	}
	return &HookError{Name: name, Result: r, Tail: tail}
}

// HookError is a hook that ran but did not succeed.
type HookError struct {
	Name   string // e.g. "bootstrap hook"
	Result HookResult
	Tail   string // sanitised stderr (or stdout) tail
}

func (e *HookError) Error() string {
	var s string
	switch r := e.Result; {
	case r.TimedOut:
		s = fmt.Sprintf("%s did not finish within %s (killed)", e.Name, r.Budget)
	case r.Signaled:
		s = fmt.Sprintf("%s killed by signal %d", e.Name, r.Signal)
	default:
		s = fmt.Sprintf("%s exited with status %d", e.Name, r.ExitCode)
	}
	if e.Tail != "" {
		s += ": " + e.Tail
	}
	return s
}

// RunHook runs argv in the guest with guest-exec (argv as is, no shell,
// output captured) and polls guest-exec-status, 20 ms at first and ×1.5 up to
// 500 ms, until the process ends, budget runs out (budget <= 0: no budget,
// only ctx) or ctx ends. A process that outlives its budget or ctx is killed
// best-effort with guest-exec "/bin/kill -KILL <pid>".
//
// A hook that ran and failed is not an error: inspect the result (or call
// its Err). The error reports agent and transport failures and ctx ending.
func (c *Client) RunHook(ctx context.Context, argv []string, budget time.Duration) (HookResult, error) {
	return c.run(ctx, argv, budget, c.kill)
}

// run is RunHook with the way a process that must stop is killed: kill
// (its pid) or killGroup (its process group, for a hook run as a group
// leader, so the children it started die with it).
func (c *Client) run(ctx context.Context, argv []string, budget time.Duration, kill func(context.Context, int64)) (HookResult, error) {
	res := HookResult{Argv: argv, Budget: budget}
	if len(argv) == 0 {
		return res, errors.New("run hook: empty argv")
	}
	pid, err := c.Exec(ctx, argv[0], argv[1:], true)
	if err != nil {
		return res, err
	}
	res.PID = pid
	start := c.clock.Now()
	delay := pollStart
	for {
		st, err := c.ExecStatus(ctx, pid)
		res.Elapsed = c.clock.Now().Sub(start)
		if err != nil {
			if !IsAgentUnavailable(err) { // a dead agent would only time out again
				kill(ctx, pid)
			}
			return res, err
		}
		if st.Exited {
			fill(&res, st)
			return res, nil
		}
		wait := delay
		if budget > 0 {
			if res.Elapsed >= budget {
				kill(ctx, pid)
				res.TimedOut = true
				return res, nil
			}
			wait = min(wait, budget-res.Elapsed)
		}
		if err := c.clock.Sleep(ctx, wait); err != nil {
			kill(ctx, pid)
			return res, fmt.Errorf("%s: %w", argv[0], err)
		}
		delay = min(delay*3/2, pollMax)
	}
}

// fill copies a finished process's status into res.
func fill(res *HookResult, st ExecStatus) {
	res.Stdout, res.Stderr = st.Stdout, st.Stderr
	res.OutTruncated, res.ErrTruncated = st.OutTruncated, st.ErrTruncated
	switch {
	case st.Signal != nil:
		res.Signaled, res.Signal = true, *st.Signal
	case st.ExitCode != nil:
		res.Exited, res.ExitCode = true, *st.ExitCode
	default:
		// Exited without a status qemu-ga could decode: count as failure.
		res.Exited, res.ExitCode = true, -1
	}
}

// kill sends SIGKILL to pid through guest-exec, ignoring errors: the agent
// may be what hung. It runs even after ctx ended, bounded by the per-command
// timeout, so a cancelled transition does not leave the hook running.
func (c *Client) kill(ctx context.Context, pid int64) {
	kctx := context.WithoutCancel(ctx)
	_, _ = c.Exec(kctx, killBinary, []string{"-KILL", strconv.FormatInt(pid, 10)}, false)
}
