package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, new(usageError)):
		fmt.Fprintln(os.Stderr, "libvirtctl:", err)
		fmt.Fprintln(os.Stderr, "run 'libvirtctl help' for usage")
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "libvirtctl:", err)
		os.Exit(1)
	}
}

// usageError is a mistake on the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// command is one subcommand: its flags, how many ids it takes and what it
// does once the connection is set up.
type command struct {
	name, args, help string
	ids              int // required positional ids (0 or 1)
	flags            func(fs *flag.FlagSet, o *opts)
	run              func(ctx context.Context, c *clients, o *opts, id string, w io.Writer) error
}

func commands() []command {
	return []command{
		{name: "list", help: "list machines (filters: --state, --zone, --max)", flags: listFlags, run: cmdList},
		{name: "get", args: "ID", ids: 1, help: "show one machine with the provider's bookkeeping", run: cmdGet},
		{name: "history", args: "ID", ids: 1, help: "show a machine's transition history", run: cmdHistory},
		{name: "watch", help: "print a snapshot, then machine changes as they happen (--events N to stop)", flags: watchFlags, run: cmdWatch},
		{name: "summary", help: "machines by state and zone, last reconcile", run: cmdSummary},
		{name: "hosts", help: "list libvirt hosts: capacity used/placeable, machines, cordon, down", run: cmdHosts},
		{name: "drain-list", args: "HOST", ids: 1, help: "the machines on a host: what must move off it before maintenance", run: cmdDrainList},
		{name: "marks", help: "list fencing marks per shard (--shard to filter)", flags: marksFlags, run: cmdMarks},
		{name: "create", args: "ID", ids: 1, help: "SPECULATIVE → CREATING → IDLE", flags: tokenFlags, run: cmdCreate},
		{name: "configure", args: "ID", ids: 1, help: "IDLE → CONFIGURING → CONFIGURED (--cluster, --blob-file, --metadata k=v)", flags: configureFlags, run: cmdConfigure},
		{name: "drain", args: "ID", ids: 1, help: "CONFIGURED → DRAINING → IDLE (--grace seconds)", flags: drainFlags, run: cmdDrain},
		{name: "delete", args: "ID", ids: 1, help: "IDLE → DELETING → SPECULATIVE", flags: tokenFlags, run: cmdDelete},
		{name: "release", args: "ID", ids: 1, help: "admin write: FAILED → destroy VM and volumes → SPECULATIVE", run: cmdRelease},
		{name: "reconcile", help: "admin write: run a reconcile pass now", run: cmdReconcile},
		{name: "cordon", args: "HOST", ids: 1, help: "admin write: no new placements on HOST (--reason TEXT); survives a restart", flags: cordonFlags, run: cmdCordon},
		{name: "uncordon", args: "HOST", ids: 1, help: "admin write: placements may go to HOST again", run: cmdUncordon},
		{name: "down", args: "HOST", ids: 1, help: "admin write: declare HOST down, off or fenced for sure (--reason TEXT, required); survives a restart", flags: downFlags, run: cmdDown},
		{name: "up", args: "HOST", ids: 1, help: "admin write: end HOST's down declaration", run: cmdUp},
		{name: "fence clear", args: "ID", ids: 1, help: "admin write: remove shard --shard's fence mark on machine ID (a machine at its shards-per-machine bound)", flags: fenceClearFlags, run: cmdFenceClear},
		{name: "migrate", args: "ID", ids: 1, help: "admin write: live-migrate an IDLE or CONFIGURED machine to another host of its zone (--to HOST)", flags: migrateFlags, run: cmdMigrate},
	}
}

// run is the whole CLI; main only maps its error to an exit status.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	o := defaultOpts()
	global := newFlagSet("libvirtctl", o, nil)
	if err := global.Parse(args); errors.Is(err, flag.ErrHelp) {
		printUsage(stdout, global)
		return nil
	} else if err != nil {
		return usageError{err.Error()}
	}
	rest := global.Args()
	if len(rest) == 0 || rest[0] == "help" || rest[0] == "-h" {
		printUsage(stdout, global)
		return nil
	}
	var cmd *command
	for _, c := range commands() {
		// A command of two words ("fence clear") takes two arguments.
		if name, n := commandName(rest, c.name); name != "" {
			cmd, rest = &c, append([]string{name}, rest[n:]...)
			break
		}
	}
	if cmd == nil {
		return usagef("unknown command %q", rest[0])
	}
	fs := newFlagSet("libvirtctl "+cmd.name, o, cmd.flags)
	ids, err := parseInterspersed(fs, rest[1:])
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "usage: libvirtctl %s %s [flags]\n  %s\n\nflags:\n", cmd.name, cmd.args, cmd.help)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil
	} else if err != nil {
		return usageError{err.Error()}
	}
	if len(ids) != cmd.ids {
		if cmd.ids == 0 {
			return usagef("%s takes no arguments, got %q", cmd.name, ids)
		}
		return usagef("usage: libvirtctl %s %s [flags]", cmd.name, cmd.args)
	}
	if err := o.validate(); err != nil {
		return err
	}
	c, err := dial(o)
	if err != nil {
		return err
	}
	id := ""
	if len(ids) == 1 {
		id = ids[0]
	}
	return cmd.run(ctx, c, o, id, stdout)
}

// commandName returns name and how many of args it spans when args start
// with it, else "".
func commandName(args []string, name string) (string, int) {
	words := strings.Fields(name)
	if len(args) < len(words) || !slices.Equal(args[:len(words)], words) {
		return "", 0
	}
	return name, len(words)
}

// parseInterspersed lets flags follow positional arguments
// ("get m-1 -o json"), which the flag package alone stops at.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func printUsage(w io.Writer, global *flag.FlagSet) {
	fmt.Fprintln(w, "usage: libvirtctl [flags] COMMAND [ID] [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %-4s %s\n", c.name, c.args, c.help)
	}
	fmt.Fprintln(w, "\nflags (valid before or after the command):")
	global.SetOutput(w)
	global.PrintDefaults()
	fmt.Fprintln(w, "\nlifecycle calls also take --shard, --epoch, --seq (fencing token);")
	fmt.Fprintln(w, "\ncertificates (under mTLS with --caller-identity=bigfleet, BigFleet ADR-0048):")
	fmt.Fprintln(w, "  create, configure, drain, delete  URI SAN bigfleet://shard/<id>; the token's shard is that id")
	fmt.Fprintln(w, "  list, get, history, watch, summary, hosts, drain-list, marks (the admin API)")
	fmt.Fprintln(w, "                                    bigfleet://readonly or bigfleet://admin (or a name on --admin-clients)")
	fmt.Fprintln(w, "  release, reconcile, cordon, uncordon, down, up, migrate, fence clear")
	fmt.Fprintln(w, "                                    a name on the provider's --admin-clients (default bigfleet://admin)")
	fmt.Fprintln(w, "run 'libvirtctl COMMAND -h' for a command's own flags.")
}
