package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/hostfence"
)

// minHostDownAfter is the shortest --host-down-after: anything shorter
// fences hosts whose link is merely reconnecting.
const minHostDownAfter = 10 * time.Second

// validateFence refuses a fence setup that cannot work: the command and
// the delay go together, the command must be an executable file, and the
// delay must outlast a reconnect.
func (c *config) validateFence() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case c.FenceCommand == "" && c.HostDownAfter == 0:
		if c.FenceTimeout != defaultFenceTimeout {
			bad("--fence-timeout needs --fence-command")
		}
		return errs
	case c.FenceCommand == "":
		bad("--host-down-after needs --fence-command: a host is declared down on its own only when its fence command succeeded")
	case c.HostDownAfter == 0:
		bad("--fence-command needs --host-down-after: how long a host must be unreachable before it is fenced")
	}
	if c.HostDownAfter != 0 && c.HostDownAfter < minHostDownAfter {
		bad("--host-down-after %v: want at least %v (shorter fences hosts that are only reconnecting)", c.HostDownAfter, minHostDownAfter)
	}
	if c.FenceTimeout <= 0 {
		bad("--fence-timeout must be positive (got %v)", c.FenceTimeout)
	}
	if c.FenceCommand != "" {
		if err := executable(c.FenceCommand); err != nil {
			bad("--fence-command %s: %v", c.FenceCommand, err)
		}
	}
	return errs
}

// executable checks that path is an absolute path to an executable
// regular file.
func executable(path string) error {
	if !filepath.IsAbs(path) {
		return errors.New("want an absolute path")
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return errors.New("not a regular file")
	case fi.Mode().Perm()&0o111 == 0:
		return errors.New("not executable")
	}
	return nil
}

// startFencer runs the fence command's watcher when --fence-command is
// set; it stops (and waits for a command under way, cancelled) before the
// backend closes.
func (d *daemon) startFencer(ctx context.Context) error {
	cfg := d.cfg
	if cfg.FenceCommand == "" {
		return nil
	}
	if _, ok := d.be.(backend.HostDownDeclarer); !ok {
		return errors.New("--fence-command: this backend cannot declare a host down")
	}
	hc := hostfence.Config{
		Command: cfg.FenceCommand, After: cfg.HostDownAfter, Timeout: cfg.FenceTimeout,
		Hosts: hostLinks(d.be), Declare: d.adm,
		Log:     d.log.With(slog.String("component", "fence")),
		Observe: d.metrics.ObserveFence,
	}
	if d.election != nil {
		// Only the acting leader fences (a standby's power-off could not
		// be declared: found by the HA lab soak, docs/ha.md).
		hc.Acting = d.election.gate.Acting
	}
	f, err := hostfence.New(hc)
	if err != nil {
		return fmt.Errorf("--fence-command: %w", err)
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); f.Run(fctx) }()
	d.onClose(func() { cancel(); <-done })
	return nil
}

// hostLinks reads the hosts' links without a call when the backend can,
// else through Hosts.
func hostLinks(be backend.Backend) func(context.Context) []backend.HostStatus {
	if hl, ok := be.(backend.HostLinker); ok {
		return func(context.Context) []backend.HostStatus { return hl.HostLinks() }
	}
	return be.Hosts
}
