package guestagent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

const cluster = "cluster-7"

// newTestBootstrapper returns a Bootstrapper on a fake guest whose bootstrap
// hook succeeds and whose image has no ready or drain hook.
func newTestBootstrapper(t testing.TB, cfg BootstrapConfig) (*Bootstrapper, *fakeGuest, *fakeClock) {
	c, g, clk := newTestClient(t)
	g.programs[DefaultBootstrapHook] = fixed(proc{Polls: 3})
	return NewBootstrapper(c, cfg), g, clk
}

// readyOn is a ready hook that says "not ready" until its n-th run.
func readyOn(n int) program {
	return func(_ []string, run int) proc {
		if run < n {
			return proc{Exit: 1, Stderr: "node not ready"}
		}
		return proc{}
	}
}

func TestConfigureHappyPath(t *testing.T) {
	t.Parallel()
	b, g, clk := newTestBootstrapper(t, BootstrapConfig{})
	g.programs[DefaultReadyHook] = readyOn(3)
	blob := testBlob()
	if err := b.Configure(t.Context(), cluster, blob); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g.files[DefaultBlobPath], blob) {
		t.Fatal("blob not delivered byte for byte")
	}
	if got := g.execsOf(DefaultBootstrapHook); !reflect.DeepEqual(got, [][]string{{"--", cluster}}) {
		t.Fatalf("bootstrap argv %q", got)
	}
	if got := g.execsOf(DefaultReadyHook); len(got) != 3 || !reflect.DeepEqual(got[2], []string{"--", cluster}) {
		t.Fatalf("ready runs %q, want 3 with the cluster id", got)
	}
	// Readiness backoff: 50 ms, then 100 ms, between the three checks.
	var between []time.Duration
	for _, d := range clk.slept() {
		if d >= 50*time.Millisecond && d%(50*time.Millisecond) == 0 {
			between = append(between, d)
		}
	}
	if !reflect.DeepEqual(between, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}) {
		t.Fatalf("sleeps %v", clk.slept())
	}
}

func TestConfigureWithoutReadyHook(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	if err := b.Configure(t.Context(), cluster, []byte("blob")); err != nil {
		t.Fatal(err)
	}
	if n := len(g.execsOf(DefaultReadyHook)); n != 0 {
		t.Fatalf("missing ready hook was executed %d times", n)
	}
}

func TestConfigureMissingReadyHookDetectedAtExec(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"spawn fails", "exit 127"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
			if name == "exit 127" {
				g.programs[DefaultReadyHook] = fixed(proc{Exit: 127, Stderr: "sh: /opt/bigfleet/ready: not found"})
			}
			// The probe cannot tell (permission trouble), so the exec decides.
			g.override = func(cmd string, args json.RawMessage) ([]byte, error, bool) {
				if cmd == cmdFileOpen && strings.Contains(string(args), DefaultReadyHook) {
					return []byte(`{"error":{"class":"GenericError","desc":"Permission denied"}}`), nil, true
				}
				return nil, nil, false
			}
			if err := b.Configure(t.Context(), cluster, []byte("blob")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestConfigureExit127OfPresentReadyHookIsFailure(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	g.programs[DefaultReadyHook] = fixed(proc{Exit: 127, Stderr: "kubectl: not found"})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := b.Configure(ctx, cluster, []byte("blob"))
	if err == nil || !strings.HasPrefix(err.Error(), "configure: node did not become ready") ||
		!strings.HasSuffix(err.Error(), "ready hook exited with status 127: kubectl: not found") {
		t.Fatalf("err = %v", err)
	}
}

func TestConfigureHookFailures(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("noise ", 10_000) + "\x1b[1mthe real reason\n"
	tests := []struct {
		name string
		p    proc
		want string
	}{
		{"exit 3", proc{Exit: 3, Stderr: "bad token\n"}, "configure: bootstrap hook exited with status 3: bad token"},
		{"signal", proc{Signal: 9}, "configure: bootstrap hook killed by signal 9"},
		{"hang", proc{Hang: true}, "configure: bootstrap hook did not finish within 2m0s (killed)"},
		{"huge stderr", proc{Exit: 1, Stderr: huge}, "configure: bootstrap hook exited with status 1: …"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, g, _ := newTestBootstrapper(t, BootstrapConfig{BootstrapBudget: 2 * time.Minute})
			g.programs[DefaultBootstrapHook] = fixed(tc.p)
			err := b.Configure(t.Context(), cluster, []byte("blob"))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("err = %v, want prefix %q", err, tc.want)
			}
			var he *HookError
			if !errors.As(err, &he) {
				t.Fatalf("err %v is not a *HookError", err)
			}
			if tc.name == "huge stderr" {
				if !strings.HasSuffix(err.Error(), "the real reason") || len(he.Tail) > DefaultTailBytes+len("…") {
					t.Fatalf("tail %q (%d bytes)", he.Tail, len(he.Tail))
				}
			}
		})
	}
}

func TestConfigureNeverReady(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	g.programs[DefaultReadyHook] = readyOn(1 << 30)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := b.Configure(ctx, cluster, []byte("blob"))
	if err == nil || !strings.HasPrefix(err.Error(), "configure: node did not become ready") ||
		!strings.Contains(err.Error(), "ready hook exited with status 1: node not ready") {
		t.Fatalf("err = %v", err)
	}
}

func TestConfigureNoAgent(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{AgentWait: 30 * time.Second})
	g.override = func(string, json.RawMessage) ([]byte, error, bool) {
		return nil, fmt.Errorf("Guest agent is not responding: %w", ErrAgentUnavailable), true
	}
	err := b.Configure(t.Context(), cluster, []byte("blob"))
	if err == nil || !strings.HasPrefix(err.Error(), "configure: guest agent did not answer within 30s") || !IsAgentUnavailable(err) {
		t.Fatalf("err = %v", err)
	}
}

// TestConfigureNoAgentShortDeadline: a caller deadline sooner than
// AgentWait still ends in the agent's own error, before that deadline.
func TestConfigureNoAgentShortDeadline(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{AgentWait: 2 * time.Minute})
	g.override = func(string, json.RawMessage) ([]byte, error, bool) {
		return nil, fmt.Errorf("Guest agent is not responding: %w", ErrAgentUnavailable), true
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := b.Configure(ctx, cluster, []byte("blob"))
	if err == nil || !strings.HasPrefix(err.Error(), "configure: guest agent did not answer within 18s") || !IsAgentUnavailable(err) {
		t.Fatalf("err = %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the agent wait used up the caller's whole deadline")
	}
}

func TestConfigureWriteErrorNamesStep(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
		return []byte(`{"error":{"class":"GenericError","desc":"No space left on device"}}`), nil, cmd == cmdFileWrite
	}
	err := b.Configure(t.Context(), cluster, []byte("blob"))
	if err == nil || !strings.HasPrefix(err.Error(), "configure: write blob: guest-file-write: agent error GenericError: No space left") {
		t.Fatalf("err = %v", err)
	}
	if g.closed == 0 {
		t.Fatal("blob handle left open")
	}
}

// TestBlobNeverInErrors drives every failure path with a distinctive blob and
// a transport that echoes requests into its errors.
func TestBlobNeverInErrors(t *testing.T) {
	t.Parallel()
	blob := []byte(strings.Repeat("SUPER-SECRET-JOIN-TOKEN-", 4000))
	b64 := base64.StdEncoding.EncodeToString(blob)
	echo := func(kind string) func(string, json.RawMessage) ([]byte, error, bool) {
		return func(cmd string, args json.RawMessage) ([]byte, error, bool) {
			if cmd != cmdFileWrite {
				return nil, nil, false
			}
			data, _ := base64.StdEncoding.DecodeString(b64[:64])
			switch kind {
			case "transport echo":
				return nil, fmt.Errorf("virDomainQemuAgentCommand(%s) failed", args), true
			case "agent echo":
				raw, _ := json.Marshal(map[string]any{"error": map[string]string{"class": "GenericError", "desc": "bad " + string(args)}})
				return raw, nil, true
			case "raw echo":
				return nil, fmt.Errorf("cannot write %q: %w", data, ErrAgentUnavailable), true
			}
			return nil, nil, false
		}
	}
	for _, kind := range []string{"transport echo", "agent echo", "raw echo", "hook fails"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
			g.override = echo(kind)
			g.programs[DefaultBootstrapHook] = fixed(proc{Exit: 2, Stderr: "failed"})
			err := b.Configure(t.Context(), cluster, blob)
			if err == nil {
				t.Fatal("want an error")
			}
			msg := fmt.Sprintf("%v %+v", err, err)
			if strings.Contains(msg, "SUPER-SECRET") || strings.Contains(msg, b64[:16]) {
				t.Fatalf("error leaks the blob: %.200s", msg)
			}
			if !strings.HasPrefix(msg, "configure: ") {
				t.Fatalf("err = %.200s", msg)
			}
			if kind == "raw echo" && !IsAgentUnavailable(err) {
				t.Fatalf("redaction lost the classification: %v", err)
			}
			if kind == "agent echo" && !IsAgentError(err) {
				t.Fatalf("redaction lost the classification: %v", err)
			}
		})
	}
}

// TestHookArgvEndsOptions: caller-supplied values come after "--", so a
// cluster id that looks like an option ("--help") reaches the hook as a value.
func TestHookArgvEndsOptions(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	g.programs[DefaultReadyHook] = readyOn(1)
	if err := b.Configure(t.Context(), "--help", []byte("blob")); err != nil {
		t.Fatal(err)
	}
	for _, hook := range []string{DefaultBootstrapHook, DefaultReadyHook} {
		if got := g.execsOf(hook); len(got) == 0 || !reflect.DeepEqual(got[0], []string{"--", "--help"}) {
			t.Errorf("%s argv tails %q, want [-- --help]", hook, got)
		}
	}
}
