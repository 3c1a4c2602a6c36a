package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/bigfleet/libvirt-provider/server/store"
)

// compactCommand is the subcommand that compacts a state file offline.
const compactCommand = "compact-state"

// runCompact is `libvirt compact-state --state FILE`: it rewrites the state
// file in the current format with full pages (store.Compact), refusing
// while a provider holds the file.
func runCompact(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(compactCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	state := fs.String("state", "", "the bbolt state file to compact; the provider using it must be stopped")
	wait := fs.Duration("lock-timeout", time.Second, "how long to wait for the state file's lock before giving up")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: libvirt %s --state FILE\n\nRewrites a stopped provider's state file compactly (see docs/storage.md).\n\nFlags:\n", compactCommand)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		}
		return fmt.Errorf("%s: %w (see %s --help)", compactCommand, err, compactCommand)
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%s: unexpected argument %q", compactCommand, fs.Arg(0))
	case *state == "":
		return fmt.Errorf("%s: --state is required", compactCommand)
	}
	start := time.Now()
	res, err := store.Compact(*state, store.CompactOptions{LockTimeout: *wait})
	if err != nil {
		return fmt.Errorf("%s: %w (is a provider still running on it?)", compactCommand, err)
	}
	fmt.Fprintf(stdout, "compacted %s: %.1f MB -> %.1f MB (%d machines, %d fence marks, %d offerings) in %s\n",
		*state, float64(res.Before)/1e6, float64(res.After)/1e6, res.Machines, res.Marks, res.Offerings,
		time.Since(start).Round(time.Millisecond))
	return nil
}
