package guestagent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The bookkeeping scripts of guestside.go run here in real shells (dash as
// /bin/sh, and busybox sh as in the test guest), with real processes: the
// fake guest only plays their effect.

func shells(t *testing.T) []string {
	var out []string
	for _, sh := range [][]string{{"/bin/sh"}, {"/bin/busybox", "sh"}} {
		if _, err := os.Stat(sh[0]); err == nil {
			out = append(out, strings.Join(sh, " "))
		}
	}
	if _, err := os.Stat(setsidBinary); err != nil || len(out) == 0 {
		t.Skip("needs " + setsidBinary + " and a shell")
	}
	return out
}

// runScript runs "sh -c script $0 args..." and fails the test unless it exits 0.
func runScript(t *testing.T, sh, script string, args ...string) {
	t.Helper()
	argv := append(strings.Fields(sh), "-c", script)
	out, err := exec.Command(argv[0], append(argv[1:], args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", sh, args[0], err, out)
	}
}

// procStat returns a process's state and process group ("" if it is gone).
func procStat(pid int) (state string, pgid int) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	pg, _ := strconv.Atoi(f[2])
	return f[0], pg
}

// groupMembers lists the live (not zombie) processes of process group pg.
func groupMembers(pg int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, g := procStat(pid); g == pg && st != "Z" && st != "" {
			out = append(out, pid)
		}
	}
	return out
}

// startWrapped starts "sleep 300 & sleep 301" as a tracked hook named name
// and returns it once its record exists.
func startWrapped(t *testing.T, sh, runDir, name string) *exec.Cmd {
	t.Helper()
	argv := append([]string{setsidBinary}, strings.Fields(sh)...)
	argv = append(argv, "-c", wrapScript, "bigfleet-hook", runDir, name, "/bin/sh", "-c", "sleep 300 & sleep 301")
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("/bin/kill", "-KILL", "--", "-"+strconv.Itoa(cmd.Process.Pid)).Run()
		_ = cmd.Wait()
	})
	rec := filepath.Join(runDir, name+".pgid")
	for start := time.Now(); ; {
		if raw, _ := os.ReadFile(rec); strings.HasSuffix(string(raw), "\n") && len(groupMembers(cmd.Process.Pid)) == 3 {
			return cmd
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no record %s / group of 3 for the wrapped hook", rec)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestScriptsBlobInRealShells(t *testing.T) {
	for _, sh := range shells(t) {
		t.Run(strings.ReplaceAll(sh, "/", "_"), func(t *testing.T) {
			dir := t.TempDir()
			run, tmp, final := filepath.Join(dir, "run"), filepath.Join(dir, ".blob.partial"), filepath.Join(dir, "blob")
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			// A leftover partial blob from an earlier attempt.
			must(os.Mkdir(tmp, 0o755))
			must(os.WriteFile(filepath.Join(tmp, "blob"), []byte("partial"), 0o666))
			runScript(t, sh, tidyScript, "bigfleet-tidy", run, tmp, "blob", trackedHooks[0], trackedHooks[1], trackedHooks[2])
			for p, want := range map[string]os.FileMode{tmp: os.ModeDir | 0o700, filepath.Join(tmp, "blob"): 0o600} {
				fi, err := os.Stat(p)
				must(err)
				if fi.Mode() != want || (!fi.IsDir() && fi.Size() != 0) {
					t.Fatalf("%s: %v %d bytes, want %v and empty", p, fi.Mode(), fi.Size(), want)
				}
			}
			// qemu-ga's guest-file-open "w" on an existing file: truncate, keep the mode.
			f, err := os.OpenFile(filepath.Join(tmp, "blob"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
			must(err)
			_, err = f.Write([]byte("secret"))
			must(err)
			must(f.Close())
			runScript(t, sh, publishScript, "bigfleet-blob", tmp, "blob", final)
			fi, err := os.Stat(final)
			must(err)
			if raw, _ := os.ReadFile(final); fi.Mode() != 0o600 || string(raw) != "secret" {
				t.Fatalf("published blob %v %q", fi.Mode(), raw)
			}
			if _, err := os.Stat(tmp); !os.IsNotExist(err) {
				t.Fatalf("private directory still there: %v", err)
			}
			runScript(t, sh, tidyScript, "bigfleet-tidy", run, tmp, "", "bootstrap")
			if _, err := os.Stat(tmp); !os.IsNotExist(err) {
				t.Fatalf("tidy without a file name created the private directory: %v", err)
			}
		})
	}
}

func TestScriptsHooksInRealShells(t *testing.T) {
	for _, sh := range shells(t) {
		t.Run(strings.ReplaceAll(sh, "/", "_"), func(t *testing.T) {
			run := filepath.Join(t.TempDir(), "run")
			// The hook keeps the wrapper's pid (exec in place), which leads
			// its own group, and the record names it.
			live := startWrapped(t, sh, run, hookDrain)
			pid := live.Process.Pid
			if _, pg := procStat(pid); pg != pid {
				t.Fatalf("hook pid %d is in group %d, want its own", pid, pg)
			}
			raw, _ := os.ReadFile(filepath.Join(run, hookDrain+".pgid"))
			if f := strings.Fields(string(raw)); len(f) != 2 || f[0] != strconv.Itoa(pid) {
				t.Fatalf("record %q, want %d and a start time", raw, pid)
			}
			// A record whose start time does not match (a reused pid) is
			// dropped, not acted on.
			other := startWrapped(t, sh, run, hookReady)
			opid := other.Process.Pid
			must(t, os.WriteFile(filepath.Join(run, hookReady+".pgid"), []byte(strconv.Itoa(opid)+" 1\n"), 0o600))

			runScript(t, sh, tidyScript, "bigfleet-tidy", run, filepath.Join(run, ".none"), "", trackedHooks[0], trackedHooks[1], trackedHooks[2])
			waitGone(t, pid)
			if left := groupMembers(opid); len(left) != 3 {
				t.Fatalf("the group of a record with another start time was touched: %v left", left)
			}
			for _, h := range trackedHooks {
				if _, err := os.Stat(filepath.Join(run, h+".pgid")); !os.IsNotExist(err) {
					t.Fatalf("record of %s still there: %v", h, err)
				}
			}
			// The budget kill takes the whole group too.
			runScript(t, sh, groupKillScript, "bigfleet-kill", strconv.Itoa(opid))
			waitGone(t, opid)
		})
	}
}

// waitGone waits until no live process of group pg remains.
func waitGone(t *testing.T, pg int) {
	t.Helper()
	for start := time.Now(); len(groupMembers(pg)) != 0; {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("group %d still has %v", pg, groupMembers(pg))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
