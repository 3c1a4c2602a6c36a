package guestagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bigfleet/libvirt-provider/internal/backoff"
)

// The booted check of the image contract (docs/image-contract.md): the
// image's /opt/bigfleet/booted hook, polled through guest-exec, says when
// the guest has finished booting; without it, systemd's own view
// (systemctl is-system-running) does; without either, the agent's answer.
const (
	DefaultBootedHook = "/opt/bigfleet/booted"
	// BootedRunBudget bounds one run of the hook: a run past it is killed
	// and counts as "still booting".
	BootedRunBudget = 10 * time.Second
	bootedPollStart = 250 * time.Millisecond
	bootedPollMax   = 2 * time.Second
	// exitTempFail (EX_TEMPFAIL) is the hook's "still booting".
	exitTempFail   = 75
	maxReasonBytes = 200
	maxCauseBytes  = 512
)

// systemctlPaths are tried in order when the image has no booted hook.
var systemctlPaths = []string{"/bin/systemctl", "/usr/bin/systemctl"}

// BootedVia says what confirmed the boot.
type BootedVia string

const (
	ViaHook      BootedVia = "hook"      // the image's booted hook exited 0
	ViaSystemctl BootedVia = "systemctl" // is-system-running said running or degraded
	ViaAgent     BootedVia = "agent"     // neither exists: the agent's answer is all there is
)

// BootedConfig tunes AwaitBooted; zero fields take the defaults above.
type BootedConfig struct {
	Hook      string
	RunBudget time.Duration
	PollStart time.Duration
	PollMax   time.Duration
	// AgentWait, if > 0, bounds the wait for the agent's first answer
	// (a Configure's --agent-wait); 0: only ctx does (a Create's deadline).
	AgentWait time.Duration
	// Progress, if set, hears each new reason the guest gives while it
	// boots ("waiting for network-online.target"), for the admin view.
	Progress func(reason string)
}

func (c *BootedConfig) setDefaults() {
	if c.Hook == "" {
		c.Hook = DefaultBootedHook
	}
	for _, d := range []struct {
		p *time.Duration
		v time.Duration
	}{{&c.RunBudget, BootedRunBudget}, {&c.PollStart, bootedPollStart}, {&c.PollMax, bootedPollMax}} {
		if *d.p <= 0 {
			*d.p = d.v
		}
	}
}

// BootError is why a guest did not get to "booted": its agent never
// answered, the image said its boot failed, or it was still booting when
// the time ran out. Its text is meant for last_error.
type BootError struct {
	Kind BootErrorKind
	Msg  string
}

// BootErrorKind classifies a BootError.
type BootErrorKind int

const (
	BootAgentSilent BootErrorKind = iota // the agent never answered
	BootFailed                           // positive evidence: the hook or systemd said so
	BootTimedOut                         // still booting at the deadline
)

func (e *BootError) Error() string { return e.Msg }

// IsBootFailed reports whether err is a boot the image itself said failed.
func IsBootFailed(err error) bool {
	var be *BootError
	return errors.As(err, &be) && be.Kind == BootFailed
}

// bootState is what one check learned.
type bootState int

const (
	stillBooting bootState = iota
	booted
	bootFailed
)

// check is one booted check's outcome: the state, and the reason (while
// booting) or the cause (failed).
type check struct {
	state bootState
	text  string
}

// AwaitBooted waits until the guest agent answers and the guest says its
// boot is complete, or ctx ends. It ends a little before ctx's deadline (a
// tenth of what is left, at most 5 s) so that its error, not the caller's
// timeout, names the cause. Only positive evidence fails a boot (the
// hook's own exit status other than 0, 75, 126 and 127, or systemd's
// failed state); an agent or transport error is retried until the end.
func (c *Client) AwaitBooted(ctx context.Context, cfg BootedConfig) (BootedVia, error) {
	cfg.setDefaults()
	start := c.clock.Now()
	wctx, cancel := c.stopEarly(ctx)
	defer cancel()
	actx, acancel := wctx, context.CancelFunc(func() {})
	if cfg.AgentWait > 0 {
		actx, acancel = context.WithTimeout(wctx, cfg.AgentWait)
	}
	err := c.WaitReady(actx)
	acancel()
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("wait for guest agent: %w", ctx.Err())
		}
		return "", &BootError{Kind: BootAgentSilent, Msg: err.Error()}
	}
	p := &poller{c: c, cfg: cfg}
	via, err := p.loop(wctx)
	if err != nil && ctx.Err() != nil {
		return "", fmt.Errorf("wait for boot: %w", ctx.Err())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		waited := roundWait(c.clock.Now().Sub(start))
		return "", &BootError{Kind: BootTimedOut, Msg: fmt.Sprintf("boot not complete within %s: %s", waited,
			cmpOr(p.last, "the booted check gave no answer yet"))}
	}
	return via, err
}

// stopEarly ends a little before ctx's deadline: a tenth of what is left,
// at most 5 s (without a deadline, when ctx ends).
func (c *Client) stopEarly(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	left := time.Until(dl)
	return context.WithDeadline(ctx, dl.Add(-min(left/10, 5*time.Second)))
}

func roundWait(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// poller runs the checks of one AwaitBooted.
type poller struct {
	c      *Client
	cfg    BootedConfig
	noHook bool   // the hook is absent: systemctl from now on
	ctl    string // the systemctl that answered; "" until one did
	last   string // the last reason the guest gave (for the timeout)
}

// loop checks with backoff until booted, failed or ctx ends (its error).
func (p *poller) loop(ctx context.Context) (BootedVia, error) {
	delay := backoff.New(p.cfg.PollStart, p.cfg.PollMax)
	for {
		via, ck := p.once(ctx)
		switch ck.state {
		case booted:
			return via, nil
		case bootFailed:
			return "", &BootError{Kind: BootFailed, Msg: "boot failed: " + ck.text}
		}
		if err := ctx.Err(); err != nil {
			return "", err // this check was cut short: the reason before it stands
		}
		if ck.text != p.last {
			p.last = ck.text
			if p.cfg.Progress != nil {
				p.cfg.Progress(ck.text)
			}
		}
		if err := p.c.clock.Sleep(ctx, delay.Next()); err != nil {
			return "", err
		}
	}
}

// once is one check: the hook, or systemctl once the hook proved absent.
func (p *poller) once(ctx context.Context) (BootedVia, check) {
	if !p.noHook {
		ck, absent := p.hook(ctx)
		if !absent {
			return ViaHook, ck
		}
		p.noHook = true
	}
	return p.systemctl(ctx)
}

// hook runs the booted hook once; absent: it is not in the image.
func (p *poller) hook(ctx context.Context) (check, bool) {
	res, err := p.c.RunHook(ctx, []string{p.cfg.Hook}, p.cfg.RunBudget)
	switch {
	case missing(err):
		return check{}, true
	case err != nil:
		return check{stillBooting, "guest agent: " + clip(err.Error(), maxReasonBytes)}, false
	case res.TimedOut:
		return check{stillBooting, fmt.Sprintf("%s did not finish within %s (killed)", p.cfg.Hook, p.cfg.RunBudget)}, false
	case res.Signaled:
		return check{stillBooting, fmt.Sprintf("%s killed by signal %d", p.cfg.Hook, res.Signal)}, false
	}
	switch res.ExitCode {
	case 0:
		return check{state: booted}, false
	case exitTempFail:
		return check{stillBooting, reasonOf(res.Stdout, p.cfg.Hook)}, false
	case 126, 127:
		return check{}, true
	}
	return check{bootFailed, causeOf(res, p.cfg.Hook)}, false
}

// systemctl asks systemd how its boot is going; with no systemctl in the
// image, the agent's answer counts as booted.
func (p *poller) systemctl(ctx context.Context) (BootedVia, check) {
	state, ctl, err := p.systemState(ctx)
	if err != nil {
		return ViaSystemctl, check{stillBooting, "guest agent: " + clip(err.Error(), maxReasonBytes)}
	}
	if ctl == "" {
		return ViaAgent, check{state: booted}
	}
	switch state {
	case "running", "degraded":
		return ViaSystemctl, check{state: booted}
	case "initializing", "starting", "", "unknown":
		return ViaSystemctl, check{stillBooting, "systemctl is-system-running: " + cmpOr(state, "no answer")}
	}
	return ViaSystemctl, check{bootFailed, "system is " + clip(state, 64) + p.failedUnits(ctx, ctl)}
}

// systemState runs "systemctl is-system-running" (the first systemctl of
// systemctlPaths that exists) and returns its first line; ctl "" means
// none exists.
func (p *poller) systemState(ctx context.Context) (state, ctl string, err error) {
	paths := systemctlPaths
	if p.ctl != "" {
		paths = []string{p.ctl}
	}
	for _, path := range paths {
		res, err := p.c.RunHook(ctx, []string{path, "is-system-running"}, p.cfg.RunBudget)
		if missing(err) || err == nil && res.Exited && (res.ExitCode == 126 || res.ExitCode == 127) {
			continue
		}
		if err != nil {
			return "", path, err
		}
		p.ctl = path
		if res.TimedOut {
			return "", path, nil
		}
		return firstLine(res.Stdout), path, nil
	}
	return "", "", nil
}

// failedUnits names the failed units ("; failed units: a.service b.service"),
// or nothing when systemctl cannot list them.
func (p *poller) failedUnits(ctx context.Context, ctl string) string {
	res, err := p.c.RunHook(ctx, []string{ctl, "list-units", "--state=failed", "--no-legend", "--plain"}, p.cfg.RunBudget)
	if err != nil || !res.Exited {
		return ""
	}
	var units []string
	for l := range strings.Lines(string(res.Stdout)) {
		if f := strings.Fields(l); len(f) > 0 {
			units = append(units, f[0])
		}
	}
	if len(units) == 0 {
		return ""
	}
	return "; failed units: " + clip(strings.Join(units, " "), maxCauseBytes)
}

// reasonOf is the last non-empty line of a still-booting hook's stdout.
func reasonOf(out []byte, hook string) string {
	var last string
	for l := range strings.Lines(string(out)) {
		if s := Tail([]byte(l), maxReasonBytes); s != "" {
			last = s
		}
	}
	if last == "" {
		return hook + " says the boot is not complete yet"
	}
	return last
}

// causeOf is a failed hook's cause: the first lines of its stdout, else
// stderr, printable and at most maxCauseBytes; or its exit status.
func causeOf(res HookResult, hook string) string {
	out := strings.TrimSpace(string(res.Stdout))
	if out == "" {
		out = strings.TrimSpace(string(res.Stderr))
	}
	if s := clip(Tail([]byte(out), len(out)+1), maxCauseBytes); s != "" {
		return s
	}
	return fmt.Sprintf("%s exited with status %d", hook, res.ExitCode)
}

// missing reports whether the agent said the program does not exist (a
// transport's "domain not found" is no such evidence).
func missing(err error) bool { return IsAgentError(err) && looksMissing(err) }

// firstLine is the first line of out, trimmed.
func firstLine(out []byte) string {
	l, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(l)
}

// clip keeps the first n bytes of s as one printable line, cut at a rune
// boundary ("…" marks the cut).
func clip(s string, n int) string {
	s = Tail([]byte(s), len(s)+1)
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
