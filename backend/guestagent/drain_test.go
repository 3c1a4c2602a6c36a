package guestagent

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
)

// drainHook scripts the graceful and the forced mode separately.
func drainHook(graceful, forced proc) program {
	return func(args []string, _ int) proc {
		if len(args) > 0 && args[0] == "--force" {
			return forced
		}
		return graceful
	}
}

func TestDrainGraceful(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	g.programs[DefaultDrainHook] = drainHook(proc{Polls: 2}, proc{Exit: 1})
	if err := b.Drain(t.Context(), cluster, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := g.execsOf(DefaultDrainHook); !reflect.DeepEqual(got, [][]string{{"--", cluster, "90"}}) {
		t.Fatalf("drain argv %q", got)
	}
}

func TestDrainGraceZeroGoesStraightToForced(t *testing.T) {
	t.Parallel()
	var cause error
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{OnEscalate: func(_ string, err error) { cause = err }})
	g.programs[DefaultDrainHook] = drainHook(proc{Hang: true}, proc{})
	if err := b.Drain(t.Context(), cluster, 0); err != nil {
		t.Fatal(err)
	}
	if got := g.execsOf(DefaultDrainHook); !reflect.DeepEqual(got, [][]string{{"--force", "--", cluster, "0"}}) {
		t.Fatalf("drain argv %q, want only the forced mode", got)
	}
	if cause != errNoGrace {
		t.Fatalf("escalation cause %v", cause)
	}
}

func TestDrainHangEscalates(t *testing.T) {
	t.Parallel()
	var cause error
	b, g, clk := newTestBootstrapper(t, BootstrapConfig{
		DrainMargin: 10 * time.Second,
		OnEscalate:  func(_ string, err error) { cause = err },
	})
	g.programs[DefaultDrainHook] = drainHook(proc{Hang: true}, proc{Polls: 1})
	start := clk.Now()
	if err := b.Drain(t.Context(), cluster, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"--", cluster, "20"}, {"--force", "--", cluster, "0"}}
	if got := g.execsOf(DefaultDrainHook); !reflect.DeepEqual(got, want) {
		t.Fatalf("drain argv %q, want %q", got, want)
	}
	if len(g.groupKills) != 1 || len(g.execsOf(killBinary)) != 0 {
		t.Fatalf("hung drain hook: group kills %v, plain kills %q; want its process group killed once", g.groupKills, g.execsOf(killBinary))
	}
	if cause == nil || cause.Error() != "drain hook did not finish within 30s (killed)" {
		t.Fatalf("escalation cause %v", cause)
	}
	if d := clk.Now().Sub(start); d < 30*time.Second || d > 31*time.Second {
		t.Fatalf("drain took %v of clock, want grace+margin", d)
	}
}

func TestDrainFailureEscalates(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	g.programs[DefaultDrainHook] = drainHook(proc{Exit: 4, Stderr: "pdb blocks eviction"}, proc{})
	if err := b.Drain(t.Context(), cluster, time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := len(g.execsOf(DefaultDrainHook)); n != 2 {
		t.Fatalf("%d drain runs, want graceful then forced", n)
	}
}

func TestDrainForcedFailsToo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		forced proc
		want   string
	}{
		{"exit", proc{Exit: 1, Stderr: "kubelet gone"}, "forced drain hook exited with status 1: kubelet gone"},
		{"hang", proc{Hang: true}, "forced drain hook did not finish within 30s (killed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
			g.programs[DefaultDrainHook] = drainHook(proc{Signal: 15}, tc.forced)
			err := b.Drain(t.Context(), cluster, time.Second)
			if err == nil || !strings.HasPrefix(err.Error(), "drain: forced drain failed too (after: drain hook killed by signal 15)") ||
				!strings.HasSuffix(err.Error(), tc.want) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

func TestDrainMissingHookIsSuccess(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	for _, grace := range []time.Duration{0, time.Minute} {
		if err := b.Drain(t.Context(), cluster, grace); err != nil {
			t.Fatalf("grace %v: %v", grace, err)
		}
	}
	if got := g.execsOf(DefaultDrainHook); len(got) != 0 {
		t.Fatalf("drain hook runs %q for an image without a drain hook", got)
	}
}

func TestDrainOutOfTimeDoesNotForce(t *testing.T) {
	t.Parallel()
	b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
	g.programs[DefaultDrainHook] = drainHook(proc{Hang: true}, proc{})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := b.Drain(ctx, cluster, time.Minute)
	if err == nil || !strings.HasPrefix(err.Error(), "drain: run drain hook: ") {
		t.Fatalf("err = %v", err)
	}
	if n := len(g.execsOf(DefaultDrainHook)); n != 1 {
		t.Fatalf("%d drain runs after ctx ended, want 1", n)
	}
}

func TestGraceSeconds(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		time.Millisecond: "1", time.Second: "1", 90 * time.Second: "90", 1500 * time.Millisecond: "2",
	} {
		if got := graceSeconds(d); got != want {
			t.Errorf("graceSeconds(%v) = %s, want %s", d, got, want)
		}
	}
}
