package guestagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// awaitBooted runs AwaitBooted on a fresh fake guest prepared by setup,
// under a deadline of a minute, recording the progress reasons.
func awaitBooted(t *testing.T, setup func(g *fakeGuest)) (BootedVia, error, []string, *fakeGuest) {
	t.Helper()
	c, g, _ := newTestClient(t)
	setup(g)
	var mu sync.Mutex
	var reasons []string
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	via, err := c.AwaitBooted(ctx, BootedConfig{Progress: func(r string) {
		mu.Lock()
		defer mu.Unlock()
		reasons = append(reasons, r)
	}})
	return via, err, reasons, g
}

func bootErrKind(t *testing.T, err error, want BootErrorKind) *BootError {
	t.Helper()
	var be *BootError
	if !errors.As(err, &be) || be.Kind != want {
		t.Fatalf("err = %v (%T), want a BootError of kind %d", err, err, want)
	}
	return be
}

func TestBootedHookExitsZero(t *testing.T) {
	via, err, reasons, g := awaitBooted(t, func(g *fakeGuest) { g.programs[DefaultBootedHook] = fixed(proc{}) })
	if err != nil || via != ViaHook {
		t.Fatalf("AwaitBooted = %q, %v; want hook, nil", via, err)
	}
	if len(reasons) != 0 || len(g.execsOf(DefaultBootedHook)) != 1 {
		t.Errorf("reasons %q, runs %d; want none and one run", reasons, len(g.execsOf(DefaultBootedHook)))
	}
}

func TestBootedHookTempfailThenZero(t *testing.T) {
	via, err, reasons, g := awaitBooted(t, func(g *fakeGuest) {
		g.programs[DefaultBootedHook] = func(_ []string, n int) proc {
			if n < 3 {
				return proc{Exit: 75, Stdout: "starting\nwaiting for network-online.target\n\n"}
			}
			return proc{}
		}
	})
	if err != nil || via != ViaHook {
		t.Fatalf("AwaitBooted = %q, %v; want hook, nil", via, err)
	}
	if got := len(g.execsOf(DefaultBootedHook)); got != 3 {
		t.Errorf("hook runs = %d, want 3", got)
	}
	if len(reasons) != 1 || reasons[0] != "waiting for network-online.target" {
		t.Errorf("progress = %q, want the last non-empty line once", reasons)
	}
}

func TestBootedHookFailureNamesTheCause(t *testing.T) {
	_, err, _, g := awaitBooted(t, func(g *fakeGuest) {
		g.programs[DefaultBootedHook] = fixed(proc{Exit: 1, Stdout: "unit kubelet-prep.service failed\x1b[0m\n" + strings.Repeat("x", 2000)})
	})
	be := bootErrKind(t, err, BootFailed)
	if !strings.HasPrefix(be.Msg, "boot failed: unit kubelet-prep.service failed") || strings.ContainsRune(be.Msg, 0x1b) {
		t.Errorf("msg = %q", be.Msg)
	}
	if len(be.Msg) > len("boot failed: ")+maxCauseBytes+len("…") {
		t.Errorf("cause not clipped: %d bytes", len(be.Msg))
	}
	if !IsBootFailed(err) || len(g.execsOf(DefaultBootedHook)) != 1 {
		t.Errorf("IsBootFailed %v, runs %d", IsBootFailed(err), len(g.execsOf(DefaultBootedHook)))
	}
}

// systemctl plays "systemctl is-system-running" answering states in turn
// (the last one repeats) and "list-units --state=failed".
func systemctl(states ...string) program {
	i := 0
	return func(args []string, _ int) proc {
		if len(args) > 0 && args[0] == "list-units" {
			return proc{Stdout: "kubelet-prep.service loaded failed failed Prep\nfoo.mount loaded failed failed Foo\n"}
		}
		s := states[min(i, len(states)-1)]
		i++
		exit := 0
		if s != "running" {
			exit = 1
		}
		return proc{Exit: exit, Stdout: s + "\n"}
	}
}

func TestBootedFallsBackToSystemctl(t *testing.T) {
	via, err, reasons, g := awaitBooted(t, func(g *fakeGuest) {
		g.programs["/usr/bin/systemctl"] = systemctl("initializing", "starting", "degraded")
	})
	if err != nil || via != ViaSystemctl {
		t.Fatalf("AwaitBooted = %q, %v; want systemctl, nil", via, err)
	}
	if runs := len(g.execsOf(DefaultBootedHook)); runs != 1 {
		t.Errorf("absent hook tried %d times, want once", runs)
	}
	if runs := len(g.execsOf("/bin/systemctl")); runs != 1 {
		t.Errorf("missing /bin/systemctl tried %d times, want once", runs)
	}
	want := []string{"systemctl is-system-running: initializing", "systemctl is-system-running: starting"}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Errorf("progress = %q, want %q", reasons, want)
	}
}

func TestBootedSystemctlMaintenanceFailsNamingUnits(t *testing.T) {
	_, err, _, _ := awaitBooted(t, func(g *fakeGuest) {
		g.programs["/bin/systemctl"] = systemctl("starting", "maintenance")
	})
	be := bootErrKind(t, err, BootFailed)
	if want := "boot failed: system is maintenance; failed units: kubelet-prep.service foo.mount"; be.Msg != want {
		t.Errorf("msg = %q, want %q", be.Msg, want)
	}
}

func TestBootedWithoutHookOrSystemctlIsTheAgent(t *testing.T) {
	via, err, _, _ := awaitBooted(t, func(*fakeGuest) {})
	if err != nil || via != ViaAgent {
		t.Fatalf("AwaitBooted = %q, %v; want agent, nil", via, err)
	}
}

func TestBootedAgentSilentNamesIt(t *testing.T) {
	_, err, _, g := awaitBooted(t, func(g *fakeGuest) {
		g.override = func(string, json.RawMessage) ([]byte, error, bool) {
			return nil, fmt.Errorf("Guest agent is not responding: %w", ErrAgentUnavailable), true
		}
	})
	be := bootErrKind(t, err, BootAgentSilent)
	if !strings.HasPrefix(be.Msg, "guest agent did not answer within ") {
		t.Errorf("msg = %q", be.Msg)
	}
	if len(g.execsOf(DefaultBootedHook)) != 0 {
		t.Error("the hook ran before the agent answered")
	}
}

// An agent error (not "no such file") and a lost reply are faults of the
// path, never evidence of a failed boot: retried.
func TestBootedAgentErrorsAreRetried(t *testing.T) {
	calls := 0
	via, err, reasons, _ := awaitBooted(t, func(g *fakeGuest) {
		g.programs[DefaultBootedHook] = fixed(proc{})
		g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
			if cmd != cmdExec {
				return nil, nil, false
			}
			calls++
			switch calls {
			case 1:
				return nil, &AgentError{Class: "GenericError", Desc: "Guest agent is busy"}, true
			case 2:
				return nil, fmt.Errorf("lost: %w", ErrAgentUnavailable), true
			}
			return nil, nil, false
		}
	})
	if err != nil || via != ViaHook {
		t.Fatalf("AwaitBooted = %q, %v; want hook, nil after retries", via, err)
	}
	if len(reasons) != 2 || !strings.HasPrefix(reasons[0], "guest agent: ") {
		t.Errorf("progress = %q", reasons)
	}
}

func TestBootedStillBootingAtDeadlineGivesTheLastReason(t *testing.T) {
	_, err, _, _ := awaitBooted(t, func(g *fakeGuest) {
		g.programs[DefaultBootedHook] = func(_ []string, n int) proc {
			return proc{Exit: 75, Stdout: fmt.Sprintf("waiting for bigfleet.boot_delay (%ds left)\n", 1000-n)}
		}
	})
	be := bootErrKind(t, err, BootTimedOut)
	if !strings.HasPrefix(be.Msg, "boot not complete within ") || !strings.Contains(be.Msg, ": waiting for bigfleet.boot_delay (") {
		t.Errorf("msg = %q", be.Msg)
	}
}

// A run that hangs is killed at its budget and counts as still booting.
func TestBootedHangingRunIsKilled(t *testing.T) {
	_, err, reasons, g := awaitBooted(t, func(g *fakeGuest) { g.programs[DefaultBootedHook] = fixed(proc{Hang: true}) })
	be := bootErrKind(t, err, BootTimedOut)
	if !strings.Contains(be.Msg, "did not finish within 10s (killed)") {
		t.Errorf("msg = %q", be.Msg)
	}
	runs, kills := len(g.execsOf(DefaultBootedHook)), len(g.execsOf(killBinary))
	if runs < 2 || kills != runs {
		t.Errorf("runs %d, kills %d: want every hung run killed", runs, kills)
	}
	if len(reasons) != 1 {
		t.Errorf("progress = %q", reasons)
	}
}

// A Create's deadline that ends the wait itself (cancel) is the caller's,
// not a boot error.
func TestBootedCallerCancelIsNotABootError(t *testing.T) {
	c, g, _ := newTestClient(t)
	g.programs[DefaultBootedHook] = fixed(proc{Exit: 75})
	ctx, cancel := context.WithCancel(t.Context())
	g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
		if cmd == cmdExecStatus {
			cancel()
		}
		return nil, nil, false
	}
	_, err := c.AwaitBooted(ctx, BootedConfig{})
	var be *BootError
	if errors.As(err, &be) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled and no BootError", err)
	}
}

// AgentWait bounds the wait for a silent agent below the caller's deadline.
func TestBootedAgentWaitBoundsTheAgent(t *testing.T) {
	c, g, clk := newTestClient(t)
	g.override = func(string, json.RawMessage) ([]byte, error, bool) {
		return nil, fmt.Errorf("Guest agent is not responding: %w", ErrAgentUnavailable), true
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	start := clk.Now()
	_, err := c.AwaitBooted(ctx, BootedConfig{AgentWait: 2 * time.Minute})
	be := bootErrKind(t, err, BootAgentSilent)
	if waited := clk.Now().Sub(start); waited > 2*time.Minute+time.Second || !strings.Contains(be.Msg, "within 2m0s") {
		t.Errorf("waited %s: %q", waited, be.Msg)
	}
}
