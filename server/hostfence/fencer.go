package hostfence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// By is who the declarations this package makes are recorded as made by.
const By = "fence-command"

// Declarer records a host as declared down (persisted, applied to the
// backend, logged), as the admin API's DeclareHostDown does.
type Declarer interface {
	DeclareDown(ctx context.Context, host, reason, by string) error
}

// Config is what a Fencer needs. Command, After, Hosts and Declare are
// required.
type Config struct {
	// Command is the fence command: an absolute path, run as
	// `Command ZONE HOST` with BIGFLEET_ZONE, BIGFLEET_HOST and
	// BIGFLEET_HOST_URI (redacted) in its environment. Exit 0 means the
	// host is off or fenced for sure.
	Command string
	After   time.Duration // unreachable this long before the command runs
	Timeout time.Duration // bound on one run of the command
	// Every is how often the hosts are looked at; 0: After/6 within 1–10 s.
	Every   time.Duration
	Hosts   func(context.Context) []backend.HostStatus
	Declare Declarer
	Log     *slog.Logger
	// Observe, if set, counts each run's result ("ok", "failed",
	// "declare-failed") by host.
	Observe func(host, result string)
	// Acting, if set, says whether this process acts (under
	// --leader-elect: the acting leader). A standby never fences: it
	// cannot declare the host down, and a power-off nobody declares leaves
	// a host off that nothing brings back. An outage is timed from when
	// the process acts: a new leader waits the whole After itself.
	Acting func() bool
	now    func() time.Time
	run    runFunc
}

// runFunc runs the fence command; tests replace it.
type runFunc func(ctx context.Context, path string, env, args []string) (output []byte, err error)

// Fencer watches the hosts' reachability and fences those unreachable
// past Config.After.
type Fencer struct {
	cfg Config

	mu      sync.Mutex
	since   map[string]time.Time // first seen unreachable, this episode
	next    map[string]time.Time // no run before this (after a failed one)
	running map[string]bool
	wg      sync.WaitGroup
}

// New checks cfg and returns a Fencer; Run starts it.
func New(cfg Config) (*Fencer, error) {
	switch {
	case !filepath.IsAbs(cfg.Command):
		return nil, fmt.Errorf("fence command %q: want an absolute path", cfg.Command)
	case cfg.After <= 0:
		return nil, errors.New("fence: After must be positive")
	case cfg.Hosts == nil || cfg.Declare == nil:
		return nil, errors.New("fence: Hosts and Declare are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.Every <= 0 {
		cfg.Every = min(max(cfg.After/6, time.Second), 10*time.Second)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.run == nil {
		cfg.run = runCommand
	}
	return &Fencer{cfg: cfg, since: map[string]time.Time{}, next: map[string]time.Time{}, running: map[string]bool{}}, nil
}

// Run looks at the hosts every Config.Every until ctx ends, then waits
// for the commands still running (each bounded by Config.Timeout and
// cancelled with ctx).
func (f *Fencer) Run(ctx context.Context) {
	t := time.NewTicker(f.cfg.Every)
	defer t.Stop()
	for {
		f.tick(ctx)
		select {
		case <-ctx.Done():
			f.wg.Wait()
			return
		case <-t.C:
		}
	}
}

// tick starts a fence for each host due one.
func (f *Fencer) tick(ctx context.Context) {
	hosts := f.cfg.Hosts(ctx)
	for _, h := range f.due(hosts, f.cfg.now()) {
		f.wg.Go(func() { f.fence(ctx, h.host, h.out) })
	}
}

type dueHost struct {
	host backend.HostStatus
	out  time.Duration // unreachable for this long
}

// due updates each host's unreachable episode and returns the hosts whose
// command must run now. A host answering or already declared down ends
// its episode. None is due while no other host answers.
func (f *Fencer) due(hosts []backend.HostStatus, now time.Time) []dueHost {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cfg.Acting != nil && !f.cfg.Acting() {
		clear(f.since)
		clear(f.next)
		return nil
	}
	var res []dueHost
	for _, h := range hosts {
		if h.Connected || h.Down {
			delete(f.since, h.Name)
			delete(f.next, h.Name)
			continue
		}
		s, seen := f.since[h.Name]
		if !seen {
			f.since[h.Name] = now
			continue
		}
		if now.Sub(s) < f.cfg.After || now.Before(f.next[h.Name]) || f.running[h.Name] {
			continue
		}
		if !anotherAnswers(hosts, h.Name) {
			if f.next[h.Name].IsZero() || !now.Before(f.next[h.Name]) {
				f.cfg.Log.Warn("host unreachable past --host-down-after but not fenced: no other host answers either (the provider's own network is the likelier cause)",
					"host", h.Name, "zone", h.Zone, "unreachable_for", now.Sub(s).Round(time.Second).String())
				f.next[h.Name] = now.Add(f.cfg.After)
			}
			continue
		}
		f.running[h.Name] = true
		res = append(res, dueHost{host: h, out: now.Sub(s)})
	}
	return res
}

func anotherAnswers(hosts []backend.HostStatus, name string) bool {
	for _, h := range hosts {
		if h.Name != name && h.Connected && !h.Down {
			return true
		}
	}
	return false
}

// fence runs the command for h and declares h down when it exits 0.
func (f *Fencer) fence(ctx context.Context, h backend.HostStatus, out time.Duration) {
	defer func() {
		f.mu.Lock()
		delete(f.running, h.Name)
		f.mu.Unlock()
	}()
	log := f.cfg.Log.With("host", h.Name, "zone", h.Zone, "command", f.cfg.Command)
	unreachable := out.Round(time.Second).String()
	log.Warn("host unreachable past --host-down-after: running the fence command", "unreachable_for", unreachable, "last_error", h.LastError)
	cctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	t0 := time.Now()
	output, err := f.cfg.run(cctx, f.cfg.Command, env(h), []string{h.Zone, h.Name})
	took := time.Since(t0).Round(time.Millisecond).String()
	if err != nil {
		f.failed(h.Name)
		log.Warn("fence command failed: the host stays as it was (not declared down); tried again after --host-down-after",
			"took", took, "err", err, "output", tail(output))
		f.observe(h.Name, "failed")
		return
	}
	reason := fmt.Sprintf("fenced by %s after %s unreachable", filepath.Base(f.cfg.Command), unreachable)
	if err := f.cfg.Declare.DeclareDown(ctx, h.Name, reason, By); err != nil {
		f.failed(h.Name)
		log.Warn("fence command succeeded but the declaration failed; tried again after --host-down-after", "took", took, "err", err)
		f.observe(h.Name, "declare-failed")
		return
	}
	log.Info("fence command succeeded; host declared down", "took", took, "output", tail(output))
	f.observe(h.Name, "ok")
}

func (f *Fencer) failed(host string) {
	f.mu.Lock()
	f.next[host] = f.cfg.now().Add(f.cfg.After)
	f.mu.Unlock()
}

func (f *Fencer) observe(host, result string) {
	if f.cfg.Observe != nil {
		f.cfg.Observe(host, result)
	}
}

func env(h backend.HostStatus) []string {
	return []string{"BIGFLEET_ZONE=" + h.Zone, "BIGFLEET_HOST=" + h.Name, "BIGFLEET_HOST_URI=" + h.URI}
}

// tail is the end of a command's output, for a log line.
func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	const n = 512
	if len(b) > n {
		b = append([]byte("…"), b[len(b)-n:]...)
	}
	return string(b)
}

// runCommand runs path in its own process group, killed as a whole when
// ctx ends, with the provider's environment plus env.
func runCommand(ctx context.Context, path string, env, args []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil && err != nil {
		err = fmt.Errorf("%w (bound: %v)", err, ctx.Err())
	}
	return out.Bytes(), err
}
