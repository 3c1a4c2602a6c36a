package guestagent

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/bigfleet/libvirt-provider/backend"
)

// The bootstrap trace: a Configure run with an operation id runs its
// bootstrap hook under tracedWrapScript, which keeps in the guest one line
// saying whether that operation's hook started and how it ended:
//
//	<op> started <pgid> <start time>    written, and synced, before the hook runs
//	<op> exit <code>                    written when the hook returned
//
// It lives next to BlobPath (on the guest's disk, not in RunDir's tmpfs):
// a guest rebooted after its hook ran must not look as if the hook never
// started. Each line replaces the file whole (write, then rename), and a
// later Configure's trace replaces an earlier one's: only the trace of the
// operation asked about counts (ProbeBootstrap). A provider that was cut
// off mid-Configure reads it to roll back, finish or fail that Configure.

// tracedWrapScript is "setsid sh -c tracedWrapScript bigfleet-traced <run
// dir> <hook name> <trace file> <op> <argv...>": wrapScript's pid record,
// the trace's "started" line, the hook as a child (not exec'ed: the shell
// outlives it to write the exit line), and the hook's end as its own: its
// exit status, or, for a status above 128 (the shell's form of "killed by
// signal N"), the same signal sent to itself, so guest-exec-status still
// says "killed by signal N". The whole group is still the shell's, so a
// group kill takes both.
const tracedWrapScript = `umask 077
d=$1 n=$2 t=$3 op=$4
shift 4
starttime() { shift 19; echo "$1"; }
s=$(cat /proc/$$/stat) || exit 126
s=${s##*) }
st=$(starttime $s)
mkdir -p -- "$d" && echo "$$ $st" >"$d/$n.pgid" || exit 126
echo "$op started $$ $st" >"$t.new" && mv -f -- "$t.new" "$t" || exit 126
sync
"$@"
rc=$?
echo "$op exit $rc" >"$t.new" && mv -f -- "$t.new" "$t"
sync
[ "$rc" -gt 128 ] && [ "$rc" -lt 160 ] && kill -"$((rc - 128))" $$
exit $rc`

// probeScript is "sh -c probeScript bigfleet-probe <trace file> <op>": it
// prints one word for what the trace says of op's hook: none (no trace of
// op), running, started (started and gone without an exit line), or
// "exit <code>".
const probeScript = `t=$1 op=$2
starttime() { shift 19; echo "$1"; }
[ -f "$t" ] || { echo none; exit 0; }
read -r o what a b <"$t" || o=
[ "$o" = "$op" ] || { echo none; exit 0; }
case $what in
exit) echo "exit $a" ;;
started)
	case $a in '' | *[!0-9]*) echo started; exit 0 ;; esac
	if s=$(cat /proc/$a/stat 2>/dev/null); then
		s=${s##*) }
		[ "$(starttime $s)" = "$b" ] && { echo running; exit 0; }
	fi
	echo started ;;
*) echo none ;;
esac
`

// checkOp refuses an operation id the one-line trace cannot hold.
func checkOp(op string) error {
	if op == "" || strings.ContainsAny(op, " \t\r\n") {
		return fmt.Errorf("operation id %q cannot key a trace", op)
	}
	return nil
}

// runBootstrap runs the bootstrap hook tracked, and traced for op (none
// for an empty op).
func (b *Bootstrapper) runBootstrap(ctx context.Context, op string, argv []string) (HookResult, error) {
	if op == "" {
		return b.runTracked(ctx, hookBootstrap, argv, b.cfg.BootstrapBudget)
	}
	wrapped := append([]string{setsidBinary, shellBinary, "-c", tracedWrapScript, "bigfleet-traced",
		b.cfg.RunDir, hookBootstrap, b.tracePath(), op}, argv...)
	res, err := b.c.run(ctx, wrapped, b.cfg.BootstrapBudget, b.c.killGroup)
	res.Argv = argv
	return res, err
}

// TracePath is where the bootstrap trace of a guest whose blob goes to
// blobPath lives: next to it, on the same disk.
func TracePath(blobPath string) string {
	dir, file := path.Split(blobPath)
	return path.Join(dir, "."+file+".trace")
}

func (b *Bootstrapper) tracePath() string { return TracePath(b.cfg.BlobPath) }

// ProbeBootstrap answers what the guest shows of the bootstrap hook of the
// Configure op. An error means the guest could not be asked (its agent
// does not answer, or the probe failed): nobody can tell yet.
func (b *Bootstrapper) ProbeBootstrap(ctx context.Context, op string) (backend.ConfigureTrace, error) {
	if err := checkOp(op); err != nil {
		return backend.ConfigureTrace{}, fmt.Errorf("probe bootstrap: %w", err)
	}
	if err := checkBlobPath(b.cfg.BlobPath); err != nil {
		return backend.ConfigureTrace{}, fmt.Errorf("probe bootstrap: %w", err)
	}
	if err := b.waitAgent(ctx); err != nil {
		return backend.ConfigureTrace{}, fmt.Errorf("probe bootstrap: %w", err)
	}
	argv := []string{shellBinary, "-c", probeScript, "bigfleet-probe", b.tracePath(), op}
	res, err := b.c.RunHook(ctx, argv, tidyBudget)
	if err == nil {
		err = res.Err(argv[3])
	}
	if err != nil {
		return backend.ConfigureTrace{}, fmt.Errorf("probe bootstrap: %w", err)
	}
	tr, err := parseTrace(string(res.Stdout))
	if err != nil {
		return backend.ConfigureTrace{}, fmt.Errorf("probe bootstrap: %w", err)
	}
	return tr, nil
}

// parseTrace reads probeScript's answer.
func parseTrace(out string) (backend.ConfigureTrace, error) {
	f := strings.Fields(out)
	switch {
	case len(f) == 1 && f[0] == "none":
		return backend.ConfigureTrace{Hook: backend.HookNeverStarted}, nil
	case len(f) == 1 && f[0] == "running":
		return backend.ConfigureTrace{Hook: backend.HookRunning}, nil
	case len(f) == 1 && f[0] == "started":
		return backend.ConfigureTrace{Hook: backend.HookVanished}, nil
	case len(f) == 2 && f[0] == "exit":
		code, err := strconv.Atoi(f[1])
		if err != nil || code < 0 || code > 255 {
			break
		}
		if code == 0 {
			return backend.ConfigureTrace{Hook: backend.HookSucceeded}, nil
		}
		return backend.ConfigureTrace{Hook: backend.HookFailed, ExitCode: code}, nil
	}
	return backend.ConfigureTrace{}, fmt.Errorf("unreadable trace answer %.80q", out)
}

// withholdOutput drops a hook's output: it may echo a blob that is no
// longer known, so it cannot be redacted.
func withholdOutput(r HookResult) HookResult {
	r.Stdout, r.Stderr = nil, []byte("[output withheld: the blob it may echo is not known here]")
	return r
}

// AwaitReady is the end of a Configure whose bootstrap hook finished ok
// under a provider that was then cut off: it waits for the ready hook as
// Configure does. The blob is gone, so what the ready hook prints cannot
// be redacted of it: its output is withheld from the error.
func (b *Bootstrapper) AwaitReady(ctx context.Context, clusterID string) error {
	if err := b.waitAgent(ctx); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	err := b.awaitReady(ctx, clusterID, withholdOutput)
	if err != nil {
		err = fmt.Errorf("configure: %w", err)
	}
	return midProtocol(ctx, err)
}
