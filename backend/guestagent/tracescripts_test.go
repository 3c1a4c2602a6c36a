package guestagent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The trace scripts of trace.go run here in real shells with real
// processes, as in the guest.

// probeReal runs probeScript and returns its one-line answer.
func probeReal(t *testing.T, sh, trace, op string) string {
	t.Helper()
	argv := append(strings.Fields(sh), "-c", probeScript, "bigfleet-probe", trace, op)
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// tracedCmd is the traced wrapper around hook (run by /bin/sh -c).
func tracedCmd(sh, run, trace, op, hook string) *exec.Cmd {
	argv := append([]string{setsidBinary}, strings.Fields(sh)...)
	argv = append(argv, "-c", tracedWrapScript, "bigfleet-traced", run, hookBootstrap, trace, op, "/bin/sh", "-c", hook)
	return exec.Command(argv[0], argv[1:]...)
}

func TestTraceScriptsInRealShells(t *testing.T) {
	for _, sh := range shells(t) {
		t.Run(strings.ReplaceAll(sh, "/", "_"), func(t *testing.T) {
			dir := t.TempDir()
			run, trace := filepath.Join(dir, "run"), filepath.Join(dir, ".blob.trace")
			if got := probeReal(t, sh, trace, "op-1"); got != "none" {
				t.Fatalf("no trace: %q", got)
			}
			// A hook that exits 3: its status is the wrapper's, and the
			// trace says so for its op only.
			cmd := tracedCmd(sh, run, trace, "op-1", "exit 3")
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
				t.Fatalf("wrapper exit: %v", err)
			}
			if got := probeReal(t, sh, trace, "op-1"); got != "exit 3" {
				t.Fatalf("op-1 after exit 3: %q", got)
			}
			// A hook killed by a signal: the wrapper dies by the same
			// signal (guest-exec-status reports it as the hook's), and the
			// trace keeps the shell's status for it.
			err = tracedCmd(sh, run, trace, "op-s", "kill -KILL $$").Run()
			if ee, ok := err.(*exec.ExitError); !ok || !signaledBy(ee, syscall.SIGKILL) {
				t.Fatalf("wrapper of a hook killed by SIGKILL: %v", err)
			}
			if got := probeReal(t, sh, trace, "op-s"); got != "exit 137" {
				t.Fatalf("op-s after SIGKILL: %q", got)
			}
			err = tracedCmd(sh, run, trace, "op-t", "kill -TERM $$").Run()
			if ee, ok := err.(*exec.ExitError); !ok || !signaledBy(ee, syscall.SIGTERM) {
				t.Fatalf("wrapper of a hook killed by SIGTERM: %v", err)
			}
			if got := probeReal(t, sh, trace, "op-0"); got != "none" {
				t.Fatalf("another op: %q", got)
			}
			if err := tracedCmd(sh, run, trace, "op-2", "true").Run(); err != nil {
				t.Fatal(err)
			}
			if got := probeReal(t, sh, trace, "op-2"); got != "exit 0" {
				t.Fatalf("op-2: %q", got)
			}
			if got := probeReal(t, sh, trace, "op-1"); got != "none" {
				t.Fatalf("an older op still counts: %q", got)
			}
			// A hook still running reads running; killed with its group
			// (as the cleanup or a budget does), it left no exit line.
			live := tracedCmd(sh, run, trace, "op-3", "sleep 300")
			must(t, live.Start())
			pid := live.Process.Pid
			t.Cleanup(func() { _ = syscallKillGroup(pid); _ = live.Wait() })
			for start := time.Now(); probeReal(t, sh, trace, "op-3") != "running"; {
				if time.Since(start) > 10*time.Second {
					t.Fatalf("op-3 never read running: %q", probeReal(t, sh, trace, "op-3"))
				}
				time.Sleep(10 * time.Millisecond)
			}
			raw, _ := os.ReadFile(filepath.Join(run, hookBootstrap+".pgid"))
			if f := strings.Fields(string(raw)); len(f) != 2 || f[0] != strconv.Itoa(pid) {
				t.Fatalf("pid record %q, want %d", raw, pid)
			}
			runScript(t, sh, groupKillScript, "bigfleet-kill", strconv.Itoa(pid))
			waitGone(t, pid)
			_ = live.Wait()
			if got := probeReal(t, sh, trace, "op-3"); got != "started" {
				t.Fatalf("op-3 after the kill: %q", got)
			}
			// A trace whose pid is now another process's (other start
			// time) is not running.
			must(t, os.WriteFile(trace, []byte("op-4 started "+strconv.Itoa(os.Getpid())+" 1\n"), 0o600))
			if got := probeReal(t, sh, trace, "op-4"); got != "started" {
				t.Fatalf("reused pid: %q", got)
			}
			if entries, _ := filepath.Glob(trace + ".new"); len(entries) != 0 {
				t.Fatalf("temporary trace left: %v", entries)
			}
		})
	}
}

func signaledBy(ee *exec.ExitError, sig syscall.Signal) bool {
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

func syscallKillGroup(pid int) error {
	return exec.Command("/bin/kill", "-KILL", "--", "-"+strconv.Itoa(pid)).Run()
}
