package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	setGCPacing(os.Getenv)
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "libvirt:", err)
		os.Exit(1)
	}
}

// run is the whole program; ctx ending means "shut down gracefully". It
// returns nil for --help and for a clean shutdown.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == compactCommand {
		return runCompact(args[1:], stdout)
	}
	var cfg config
	fs := newFlagSet(&cfg)
	fs.SetOutput(io.Discard) // errors are returned; --help goes to stdout
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs, stdout)
			return nil
		}
		return fmt.Errorf("%w (see --help)", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	return serve(ctx, cfg, log, stdout)
}

func printUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "Usage: libvirt [flags]\n       libvirt %s --state FILE\n\nServes BigFleet's CapacityProvider for libvirt hosts.\n\nFlags:\n", compactCommand)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil || !strings.EqualFold(l.String(), s) {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

func newLogger(cfg config, w io.Writer) *slog.Logger {
	level, _ := parseLevel(cfg.LogLevel) // validated
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
