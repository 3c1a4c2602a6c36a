package guestagent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

const traceFile = "/opt/bigfleet/.bootstrap.blob.trace"

func probeOK(t *testing.T, b *Bootstrapper, op string) backend.ConfigureTrace {
	t.Helper()
	tr, err := b.ProbeBootstrap(t.Context(), op)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// A Configure with an operation id runs its bootstrap hook traced: the
// trace says that op's hook finished ok, and says nothing of another op.
func TestConfigureOpTracesTheBootstrapHook(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	if b.tracePath() != traceFile {
		t.Fatalf("trace path %s", b.tracePath())
	}
	if tr := probeOK(t, b, "op-1"); tr.Hook != backend.HookNeverStarted {
		t.Fatalf("before any Configure: %v", tr)
	}
	if err := b.ConfigureOp(t.Context(), "op-1", cluster, testBlob()); err != nil {
		t.Fatal(err)
	}
	if got := string(g.files[traceFile]); got != "op-1 exit 0\n" {
		t.Fatalf("trace %q", got)
	}
	if runs := g.execsOf(DefaultBootstrapHook); len(runs) != 1 || strings.Join(runs[0], " ") != "-- "+cluster {
		t.Fatalf("bootstrap hook runs %q", runs)
	}
	if tr := probeOK(t, b, "op-1"); tr.Hook != backend.HookSucceeded {
		t.Fatalf("op-1: %v", tr)
	}
	if tr := probeOK(t, b, "op-0"); tr.Hook != backend.HookNeverStarted {
		t.Fatalf("an older op counted: %v", tr)
	}
}

// A hook that failed reads as failed with its status; a plain Configure
// (no op) leaves no trace.
func TestTraceOfFailedHookAndUntraced(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	g.programs[DefaultBootstrapHook] = fixed(proc{Exit: 3, Stderr: "kubeadm join failed"})
	if err := b.ConfigureOp(t.Context(), "op-1", cluster, testBlob()); err == nil {
		t.Fatal("configure succeeded")
	}
	if tr := probeOK(t, b, "op-1"); tr.Hook != backend.HookFailed || tr.ExitCode != 3 {
		t.Fatalf("op-1: %+v", tr)
	}
	b2, g2, _ := newTestBootstrapper(t, BootstrapConfig{})
	if err := b2.Configure(t.Context(), cluster, testBlob()); err != nil {
		t.Fatal(err)
	}
	if _, ok := g2.files[traceFile]; ok {
		t.Fatal("an untraced Configure wrote a trace")
	}
}

// What a SIGKILLed provider leaves: a traced hook still running reads
// running; once the cleanup killed it (no exit line), it started and
// vanished: nobody can tell what it did.
func TestTraceOfOrphanedHook(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	g.programs[DefaultBootstrapHook] = fixed(proc{Hang: true})
	wrapped := []string{shellBinary, "-c", tracedWrapScript, "bigfleet-traced", b.cfg.RunDir, hookBootstrap, traceFile, "op-9",
		DefaultBootstrapHook, "--", cluster}
	pid, err := b.c.Exec(t.Context(), setsidBinary, wrapped, true)
	if err != nil {
		t.Fatal(err)
	}
	if tr := probeOK(t, b, "op-9"); tr.Hook != backend.HookRunning {
		t.Fatalf("orphan running: %v", tr)
	}
	if err := NewBootstrapper(b.c, BootstrapConfig{}).Abandon(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(g.reaped) != 1 || g.reaped[0] != pid {
		t.Fatalf("reaped %v, want %d", g.reaped, pid)
	}
	if tr := probeOK(t, b, "op-9"); tr.Hook != backend.HookVanished {
		t.Fatalf("after the cleanup: %v", tr)
	}
}

// An operation id the one-line trace cannot hold is refused, and an
// agent that does not answer is an error (nobody can tell), not an answer.
func TestProbeRefusals(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	for _, op := range []string{"", "op 1", "op\n1"} {
		if _, err := b.ProbeBootstrap(t.Context(), op); err == nil {
			t.Errorf("probe of op %q accepted", op)
		}
		if op != "" {
			if err := b.ConfigureOp(t.Context(), op, cluster, testBlob()); err == nil {
				t.Errorf("configure of op %q accepted", op)
			}
		}
	}
	g.scriptFail["bigfleet-probe"] = proc{Exit: 2, Stderr: "sh: syntax error"}
	if _, err := b.ProbeBootstrap(t.Context(), "op-1"); err == nil || !strings.Contains(err.Error(), "syntax error") {
		t.Fatalf("failed probe: %v", err)
	}
}

func TestParseTrace(t *testing.T) {
	t.Parallel()
	for out, want := range map[string]backend.ConfigureTrace{
		"none\n":     {Hook: backend.HookNeverStarted},
		"running\n":  {Hook: backend.HookRunning},
		"started\n":  {Hook: backend.HookVanished},
		"exit 0\n":   {Hook: backend.HookSucceeded},
		"exit 137\n": {Hook: backend.HookFailed, ExitCode: 137},
	} {
		if got, err := parseTrace(out); err != nil || got != want {
			t.Errorf("parseTrace(%q) = %+v, %v; want %+v", out, got, err, want)
		}
	}
	for _, bad := range []string{"", "exit", "exit -1", "exit 256", "exit x", "none none", "done"} {
		if _, err := parseTrace(bad); err == nil {
			t.Errorf("parseTrace(%q) accepted", bad)
		}
	}
}

// FuzzParseTrace: any answer either parses to a known hook state or is an
// error, never both, never a panic.
func FuzzParseTrace(f *testing.F) {
	for _, s := range []string{"none\n", "running", "started", "exit 0", "exit 255", "exit 99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		tr, err := parseTrace(out)
		if err != nil {
			if tr != (backend.ConfigureTrace{}) {
				t.Fatalf("error with an answer: %+v", tr)
			}
			return
		}
		if tr.Hook < backend.HookNeverStarted || tr.Hook > backend.HookVanished || (tr.Hook != backend.HookFailed) != (tr.ExitCode == 0) {
			t.Fatalf("parseTrace(%q) = %+v", out, tr)
		}
	})
}

// After a restart the ready hook's output cannot be redacted of a blob no
// longer known: it is withheld from the error.
func TestAwaitReadyWithholdsOutput(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	g.programs[DefaultReadyHook] = fixed(proc{Exit: 1, Stderr: "token abcdef0123456789 rejected"})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := b.AwaitReady(ctx, cluster)
	if err == nil || strings.Contains(err.Error(), "abcdef") || !strings.Contains(err.Error(), "withheld") {
		t.Fatalf("err %v", err)
	}
	g.programs[DefaultReadyHook] = fixed(proc{})
	if err := b.AwaitReady(t.Context(), cluster); err != nil {
		t.Fatal(err)
	}
}
