package guestagent

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"time"
)

// Guest-side bookkeeping: what Configure and Drain leave in the guest must
// be found again by a later transition even when the provider that started
// them was SIGKILLed (its memory is gone), so the record lives in the guest:
//
//   - the blob is written into a private (0700) directory next to BlobPath,
//     into a file created 0600 before any byte of it is written, and only
//     renamed to BlobPath once complete: BlobPath never holds a partial
//     blob, and the partial one is never readable by anyone but root;
//   - every hook runs as the leader of its own session and process group,
//     and records "<pgid> <start time>" in RunDir/<hook>.pgid first.
//
// A transition starts by tidying: it kills the process group of every hook
// whose recorded leader still runs (same pid and start time: a reused pid
// is left alone) and removes the private blob directory. A Configure that
// gives up tidies too; a hook that outlives its budget is killed with its
// whole group.
//
// All of it runs through guest-exec with fixed argv: the scripts below are
// constants and every value (a path, a hook name) is a positional
// parameter, never part of the script text.

const (
	shellBinary  = "/bin/sh"
	setsidBinary = "/usr/bin/setsid"

	// DefaultRunDir holds the hooks' pid records. It should be on a tmpfs
	// (cleared by a reboot, when every recorded process is gone anyway).
	DefaultRunDir = "/run/bigfleet-provider"

	// tidyBudget bounds one run of a bookkeeping script.
	tidyBudget = 30 * time.Second
)

// The hooks a transition runs; each has one pid record.
const (
	hookBootstrap = "bootstrap"
	hookReady     = "ready"
	hookDrain     = "drain"
)

var trackedHooks = []string{hookBootstrap, hookReady, hookDrain}

// wrapScript runs as "sh -c wrapScript bigfleet-hook <run dir> <hook name>
// <argv...>" under setsid: it records its own pid (the new session's and
// process group's id) and start time, then execs the hook in place, so the
// hook keeps that pid and guest-exec-status reports the hook's own exit.
// qemu-ga's children are never process group leaders, so setsid does not
// fork and the pid guest-exec returns is that of the group.
const wrapScript = `umask 077
d=$1 n=$2
shift 2
starttime() { shift 19; echo "$1"; }
s=$(cat /proc/$$/stat) || exit 126
s=${s##*) }
mkdir -p -- "$d" && echo "$$ $(starttime $s)" >"$d/$n.pgid" || exit 126
exec "$@"`

// reapScript kills the process group of each named hook whose recorded
// leader still runs with the recorded start time, and removes the records.
// It expects "$d" (the run dir) and the hook names in "$@".
const reapScript = `starttime() { shift 19; echo "$1"; }
for n in "$@"; do
	f=$d/$n.pgid
	[ -f "$f" ] || continue
	read -r pg st <"$f" || pg=
	case $pg in '' | *[!0-9]*) pg= ;; esac
	if [ -n "$pg" ] && s=$(cat /proc/$pg/stat 2>/dev/null); then
		s=${s##*) }
		[ "$(starttime $s)" = "$st" ] && kill -KILL -"$pg"
	fi
	rm -f -- "$f"
done
`

// tidyScript is "sh -c tidyScript bigfleet-tidy <run dir> <blob dir>
// <blob file> <hook names...>": it reaps, removes the private blob
// directory, and when <blob file> is not empty creates a fresh private
// directory holding that file, empty and 0600, for the blob to be written
// into.
const tidyScript = `umask 077
d=$1 tmp=$2 file=$3
shift 3
` + reapScript + `rm -rf -- "$tmp" || exit 1
[ -n "$file" ] || exit 0
mkdir -m 0700 -- "$tmp" && : >"$tmp/$file"
`

// publishScript is "sh -c publishScript bigfleet-blob <blob dir> <blob
// file> <blob path>": it renames the complete blob into place (rename(2):
// atomic, and the file keeps its mode) and removes the private directory.
const publishScript = `mv -f -- "$1/$2" "$3" && rmdir -- "$1"`

// groupKillScript is "sh -c groupKillScript bigfleet-kill <pid>": the
// shell's kill takes a negative pid (a process group) everywhere, /bin/kill
// does not (busybox rejects "--", procps needs it).
const groupKillScript = `kill -KILL -"$1" 2>/dev/null || kill -KILL "$1"`

// blobDir is the private directory the blob is written in: next to
// BlobPath, so the final rename stays on one filesystem.
func (b *Bootstrapper) blobDir() string {
	dir, file := path.Split(b.cfg.BlobPath)
	return path.Join(dir, "."+file+".partial")
}

// tidy kills what earlier runs of the tracked hooks left running and
// removes a partial blob. With prepare it also creates the empty 0600 file
// the blob is then written into, and returns its path.
func (b *Bootstrapper) tidy(ctx context.Context, prepare bool) (string, error) {
	file := ""
	if prepare {
		file = path.Base(b.cfg.BlobPath)
	}
	argv := append([]string{shellBinary, "-c", tidyScript, "bigfleet-tidy", b.cfg.RunDir, b.blobDir(), file}, trackedHooks...)
	if err := b.runScript(ctx, argv); err != nil {
		return "", fmt.Errorf("clean up after earlier attempts: %w", err)
	}
	if !prepare {
		return "", nil
	}
	return path.Join(b.blobDir(), file), nil
}

// giveUp tidies after a Configure that failed, so no partial blob and no
// hook process outlives it. It runs even when ctx ended (bounded by the
// per-command timeout and tidyBudget), but not when the agent is gone: the
// next transition tidies first anyway.
func (b *Bootstrapper) giveUp(ctx context.Context, cause error) {
	if IsAgentUnavailable(cause) {
		return
	}
	_, _ = b.tidy(context.WithoutCancel(ctx), false)
}

// publish renames the complete blob to BlobPath.
func (b *Bootstrapper) publish(ctx context.Context) error {
	argv := []string{shellBinary, "-c", publishScript, "bigfleet-blob", b.blobDir(), path.Base(b.cfg.BlobPath), b.cfg.BlobPath}
	if err := b.runScript(ctx, argv); err != nil {
		return fmt.Errorf("move blob into place: %w", err)
	}
	return nil
}

// runScript runs a bookkeeping script and turns a non-zero exit into an
// error with its stderr tail (the scripts never print the blob: it never
// reaches them).
func (b *Bootstrapper) runScript(ctx context.Context, argv []string) error {
	res, err := b.c.RunHook(ctx, argv, tidyBudget)
	if err != nil {
		return err
	}
	return res.Err(argv[3])
}

// runTracked runs a hook under the pid-recording wrapper. The result names
// the hook's own argv, not the wrapper's. A hook that outlives its budget
// or ctx is killed with its whole process group.
func (b *Bootstrapper) runTracked(ctx context.Context, name string, argv []string, budget time.Duration) (HookResult, error) {
	wrapped := append([]string{setsidBinary, shellBinary, "-c", wrapScript, "bigfleet-hook", b.cfg.RunDir, name}, argv...)
	res, err := b.c.run(ctx, wrapped, budget, b.c.killGroup)
	res.Argv = argv
	return res, err
}

// killGroup sends SIGKILL to the process group led by pid, best-effort
// like kill.
func (c *Client) killGroup(ctx context.Context, pid int64) {
	kctx := context.WithoutCancel(ctx)
	_, _ = c.Exec(kctx, shellBinary, []string{"-c", groupKillScript, "bigfleet-kill", strconv.FormatInt(pid, 10)}, false)
}

// errBadBlobPath is a BlobPath the private directory cannot sit next to.
var errBadBlobPath = errors.New("blob path must be an absolute path to a file")

func checkBlobPath(p string) error {
	if !path.IsAbs(p) || path.Base(p) == "/" || path.Clean(p) != p {
		return fmt.Errorf("%w: %q", errBadBlobPath, p)
	}
	return nil
}

// Abandon removes what an interrupted Configure left in the guest (its
// partial blob, its hook processes) when the provider cannot go on with
// it: the blob is never stored, so a Configure cut by a restart ends
// FAILED, and nothing it started may outlive it (a bootstrap hook left
// running could still join the node to the cluster).
//
// The agent may be reconnecting (libvirt resets its channel when the
// client that ran the interrupted command went away), so it is waited for
// first, within ctx.
func (b *Bootstrapper) Abandon(ctx context.Context) error {
	if err := b.waitAgent(ctx); err != nil {
		return err
	}
	_, err := b.tidy(ctx, false)
	return err
}
