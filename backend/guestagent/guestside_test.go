package guestagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// The guest-side bookkeeping of issue 15 cases 6 and 7, against the fake
// guest. guestscripts_test.go runs the same scripts in a real shell.

func blobOf(n int) []byte {
	return bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
}

// TestConfigureBlobIsPrivateBeforeItsFirstByte: every guest-file-write goes
// to a 0600 file in the private directory (created by tidy before the
// write), never to BlobPath; BlobPath then holds the whole blob, 0600, and
// the private directory is gone.
func TestConfigureBlobIsPrivateBeforeItsFirstByte(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{ChunkSize: 100})
	blob := blobOf(1000)
	tmp := b.blobDir() + "/bootstrap.blob"
	writes := 0
	g.override = func(cmd string, args json.RawMessage) ([]byte, error, bool) {
		if cmd != cmdFileWrite {
			return nil, nil, false
		}
		var a fileWriteArgs
		g.decode(args, &a)
		g.mu.Lock()
		defer g.mu.Unlock()
		writes++
		if p := g.handles[a.Handle]; p != tmp || g.modes[p] != 0o600 {
			t.Errorf("write %d to %s mode %o, want %s mode 600", writes, p, g.modes[p], tmp)
		}
		return nil, nil, false
	}
	if err := b.Configure(t.Context(), cluster, blob); err != nil {
		t.Fatal(err)
	}
	if writes != 10 {
		t.Fatalf("%d writes, want 10", writes)
	}
	if !bytes.Equal(g.files[DefaultBlobPath], blob) || g.modes[DefaultBlobPath] != 0o600 {
		t.Fatalf("blob path holds %d bytes mode %o, want %d bytes mode 600", len(g.files[DefaultBlobPath]), g.modes[DefaultBlobPath], len(blob))
	}
	if _, ok := g.files[tmp]; ok {
		t.Fatal("the private copy is still there")
	}
	if want := []string{"bigfleet-tidy", "bigfleet-blob"}; !slices.Equal(g.scripts, want) {
		t.Fatalf("scripts %q, want %q", g.scripts, want)
	}
}

// TestConfigureGivingUpRemovesPartialBlob: a write that fails half-way
// (an agent error) leaves neither the partial blob nor a blob at BlobPath.
func TestConfigureGivingUpRemovesPartialBlob(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{ChunkSize: 100})
	n := 0
	g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
		if cmd == cmdFileWrite {
			if n++; n == 4 {
				return nil, &AgentError{Class: "GenericError", Desc: "No space left on device"}, true
			}
		}
		return nil, nil, false
	}
	err := b.Configure(t.Context(), cluster, blobOf(1000))
	if err == nil || !strings.Contains(err.Error(), "write blob") {
		t.Fatalf("err = %v", err)
	}
	for p := range g.files {
		if strings.Contains(p, "bootstrap.blob") {
			t.Errorf("after giving up the guest holds %s (%d bytes)", p, len(g.files[p]))
		}
	}
	if want := []string{"bigfleet-tidy", "bigfleet-tidy"}; !slices.Equal(g.scripts, want) {
		t.Fatalf("scripts %q, want a tidy before and after", g.scripts)
	}
}

// TestConfigureRetryRemovesPartialBlob: when the agent stops answering
// mid-blob nothing can be cleaned at once (the error is transient); the
// retried Configure removes the partial blob before it writes again.
func TestConfigureRetryRemovesPartialBlob(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{ChunkSize: 100})
	blob := blobOf(1000)
	tmp := b.blobDir() + "/bootstrap.blob"
	n, dead := 0, true
	g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
		if cmd == cmdFileWrite && dead {
			if n++; n == 4 {
				return nil, ErrAgentUnavailable, true
			}
		}
		if cmd == cmdFileClose && dead && n >= 4 {
			return nil, ErrAgentUnavailable, true
		}
		return nil, nil, false
	}
	err := b.Configure(t.Context(), cluster, blob)
	if !IsAgentUnavailable(err) {
		t.Fatalf("err = %v, want the agent unavailable", err)
	}
	if got := len(g.files[tmp]); got != 300 {
		t.Fatalf("partial blob %d bytes, want 300 (the precondition)", got)
	}
	if _, ok := g.files[DefaultBlobPath]; ok {
		t.Fatal("a partial blob reached the blob path")
	}
	dead = false
	retry := NewBootstrapper(b.c, BootstrapConfig{ChunkSize: 100}) // a restarted provider
	first := true
	g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
		if cmd == cmdFileWrite && first {
			first = false
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(g.files[tmp]) != 0 {
				t.Errorf("the retry's first write finds %d bytes of the first attempt", len(g.files[tmp]))
			}
		}
		return nil, nil, false
	}
	if err := retry.Configure(t.Context(), cluster, blob); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g.files[DefaultBlobPath], blob) || g.modes[DefaultBlobPath] != 0o600 {
		t.Fatalf("after the retry the blob path holds %d bytes mode %o", len(g.files[DefaultBlobPath]), g.modes[DefaultBlobPath])
	}
}

// startOrphan starts a tracked hook that hangs and is never polled: what a
// SIGKILLed provider leaves behind. It returns the hook's pid.
func startOrphan(t *testing.T, b *Bootstrapper, g *fakeGuest, name, hook string) int64 {
	t.Helper()
	g.programs[hook] = fixed(proc{Hang: true})
	wrapped := append([]string{shellBinary, "-c", wrapScript, "bigfleet-hook", b.cfg.RunDir, name}, hook, "--", cluster)
	pid, err := b.c.Exec(t.Context(), setsidBinary, wrapped, true)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestResumedDrainKillsOrphanedHook: a drain hook left running by a
// provider that died is killed (its group, through its record in the
// guest) by the next Drain of a Bootstrapper that never saw it.
func TestResumedDrainKillsOrphanedHook(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	orphan := startOrphan(t, b, g, hookDrain, DefaultDrainHook)
	g.programs[DefaultDrainHook] = fixed(proc{Polls: 1})
	resumed := NewBootstrapper(b.c, BootstrapConfig{})
	if err := resumed.Drain(t.Context(), cluster, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.reaped, []int64{orphan}) {
		t.Fatalf("reaped %v, want the orphaned hook %d", g.reaped, orphan)
	}
	if g.scripts[0] != "bigfleet-tidy" || len(g.execsOf(DefaultDrainHook)) != 2 {
		t.Fatalf("scripts %q drain runs %q: want the tidy first, then one more drain run", g.scripts, g.execsOf(DefaultDrainHook))
	}
}

// TestConfigureKillsOrphanedBootstrapHook: the same for a bootstrap hook of
// an interrupted Configure, before the blob is written again.
func TestConfigureKillsOrphanedBootstrapHook(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	orphan := startOrphan(t, b, g, hookBootstrap, DefaultBootstrapHook)
	g.programs[DefaultBootstrapHook] = fixed(proc{})
	if err := NewBootstrapper(b.c, BootstrapConfig{}).Configure(t.Context(), cluster, blobOf(64)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.reaped, []int64{orphan}) {
		t.Fatalf("reaped %v, want the orphaned hook %d", g.reaped, orphan)
	}
}

// TestFinishedHookIsNotReaped: a hook that ended by itself leaves a stale
// record; the next tidy drops it without killing anything.
func TestFinishedHookIsNotReaped(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	if err := b.Configure(t.Context(), cluster, blobOf(64)); err != nil {
		t.Fatal(err)
	}
	if err := b.Configure(t.Context(), cluster, blobOf(64)); err != nil {
		t.Fatal(err)
	}
	if len(g.reaped) != 0 || len(g.groupKills) != 0 {
		t.Fatalf("reaped %v group kills %v after hooks that finished", g.reaped, g.groupKills)
	}
}

// TestTimedOutBootstrapHookKilledWithItsGroup: a bootstrap hook past its
// budget is killed as a process group (its children die too).
func TestTimedOutBootstrapHookKilledWithItsGroup(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{BootstrapBudget: 5 * time.Second})
	g.programs[DefaultBootstrapHook] = fixed(proc{Hang: true})
	err := b.Configure(t.Context(), cluster, blobOf(64))
	var he *HookError
	if !errors.As(err, &he) || !he.Result.TimedOut {
		t.Fatalf("err = %v", err)
	}
	if len(g.groupKills) != 1 || g.groupKills[0] != he.Result.PID || len(g.execsOf(killBinary)) != 0 {
		t.Fatalf("group kills %v (hook pid %d), plain kills %q", g.groupKills, he.Result.PID, g.execsOf(killBinary))
	}
	if !slices.Equal(he.Result.Argv, []string{DefaultBootstrapHook, "--", cluster}) {
		t.Fatalf("result argv %q, want the hook's own", he.Result.Argv)
	}
}

// TestTidyFailureStopsConfigure: if the guest cannot be cleaned (here the
// script fails), no byte of the blob is written.
func TestTidyFailureStopsConfigure(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	g.scriptFail["bigfleet-tidy"] = proc{Exit: 1, Stderr: "rm: can't remove: Read-only file system"}
	err := b.Configure(t.Context(), cluster, blobOf(64))
	if err == nil || !strings.Contains(err.Error(), "clean up after earlier attempts") ||
		!strings.Contains(err.Error(), "Read-only file system") {
		t.Fatalf("err = %v", err)
	}
	if len(g.writes) != 0 || len(g.execsOf(DefaultBootstrapHook)) != 0 {
		t.Fatalf("writes %v bootstrap runs %q after a failed tidy", g.writes, g.execsOf(DefaultBootstrapHook))
	}
}

// TestBadBlobPathRefused: the private directory sits next to BlobPath, so
// a BlobPath without a file name is refused before the guest is touched.
func TestBadBlobPathRefused(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"relative/blob", "/", "/opt/bigfleet/../x", "/opt/bigfleet/"} {
		b, g, _ := newTestBootstrapper(t, BootstrapConfig{BlobPath: p})
		if err := b.Configure(t.Context(), cluster, blobOf(64)); !errors.Is(err, errBadBlobPath) {
			t.Errorf("BlobPath %q: err = %v", p, err)
		}
		if len(g.reqs) != 0 {
			t.Errorf("BlobPath %q: agent commands %q", p, g.reqs)
		}
	}
}

// TestAbandonWaitsForTheAgent: after a provider restart the agent may be
// reconnecting (the soak saw "QEMU guest agent is not connected" right
// after a SIGKILL mid-Configure); Abandon waits for it, then kills the
// interrupted Configure's bootstrap hook and removes its partial blob.
func TestAbandonWaitsForTheAgent(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	orphan := startOrphan(t, b, g, hookBootstrap, DefaultBootstrapHook)
	pings := 0
	g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
		if cmd == cmdPing || cmd == cmdSync {
			if pings++; pings <= 3 {
				return nil, ErrAgentUnavailable, true
			}
		}
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := NewBootstrapper(b.c, BootstrapConfig{}).Abandon(ctx); err != nil {
		t.Fatalf("Abandon: %v", err)
	}
	if pings <= 3 {
		t.Fatalf("Abandon did not wait for the agent (%d pings)", pings)
	}
	if !slices.Equal(g.reaped, []int64{orphan}) {
		t.Fatalf("reaped %v, want the interrupted Configure's hook %d", g.reaped, orphan)
	}
}
