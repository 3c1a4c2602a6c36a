package guestagent

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRunHookOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    proc
		ok   bool
		err  string
	}{
		{"exit 0", proc{Polls: 2, Stdout: "done"}, true, ""},
		{"exit 3", proc{Exit: 3, Stderr: "kubeadm: bad token\n"}, false, "bootstrap hook exited with status 3: kubeadm: bad token"},
		{"signal", proc{Polls: 1, Signal: 9}, false, "bootstrap hook killed by signal 9"},
		{"stdout fallback", proc{Exit: 1, Stdout: "only stdout"}, false, "bootstrap hook exited with status 1: only stdout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, g, _ := newTestClient(t)
			g.programs["/hook"] = fixed(tc.p)
			res, err := c.RunHook(t.Context(), []string{"/hook", "c-1"}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK() != tc.ok {
				t.Fatalf("OK = %v, result %+v", res.OK(), res)
			}
			if herr := res.Err("bootstrap hook"); tc.err == "" && herr != nil || tc.err != "" && (herr == nil || herr.Error() != tc.err) {
				t.Fatalf("Err = %v, want %q", herr, tc.err)
			}
			if got := g.execsOf("/hook"); !reflect.DeepEqual(got, [][]string{{"c-1"}}) {
				t.Fatalf("argv %q", got)
			}
		})
	}
}

func TestRunHookPollsWithBackoff(t *testing.T) {
	t.Parallel()
	c, g, clk := newTestClient(t)
	g.programs["/hook"] = fixed(proc{Polls: 12})
	res, err := c.RunHook(t.Context(), []string{"/hook"}, time.Minute)
	if err != nil || !res.OK() {
		t.Fatalf("RunHook = %+v, %v", res, err)
	}
	got := clk.slept()
	if len(got) != 12 || got[0] != 20*time.Millisecond || got[1] != 30*time.Millisecond {
		t.Fatalf("sleeps %v: want 12 starting 20ms, 30ms", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] || got[i] > 500*time.Millisecond {
			t.Fatalf("sleeps %v: not a backoff capped at 500ms", got)
		}
	}
	if got[len(got)-1] != 500*time.Millisecond {
		t.Fatalf("sleeps %v: never reached the 500ms cap", got)
	}
}

func TestRunHookBudgetKills(t *testing.T) {
	t.Parallel()
	c, g, clk := newTestClient(t)
	g.programs["/hook"] = fixed(proc{Hang: true})
	start := clk.Now()
	res, err := c.RunHook(t.Context(), []string{"/hook"}, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.OK() || res.Elapsed != 3*time.Second || clk.Now().Sub(start) != 3*time.Second {
		t.Fatalf("result %+v after %v", res, clk.Now().Sub(start))
	}
	kills := g.execsOf(killBinary)
	if len(kills) != 1 || kills[0][0] != "-KILL" || kills[0][1] != itoa(res.PID) {
		t.Fatalf("kills %q for pid %d", kills, res.PID)
	}
	if e := res.Err("bootstrap hook"); e == nil || e.Error() != "bootstrap hook did not finish within 3s (killed)" {
		t.Fatalf("Err = %v", e)
	}
}

func TestRunHookContextEndKills(t *testing.T) {
	t.Parallel()
	c, g, _ := newTestClient(t)
	g.programs["/hook"] = fixed(proc{Hang: true})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := c.RunHook(ctx, []string{"/hook"}, 0) // no budget: only ctx bounds it
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if len(g.execsOf(killBinary)) != 1 {
		t.Fatal("hook not killed when ctx ended")
	}
}

func TestRunHookEmptyArgv(t *testing.T) {
	t.Parallel()
	c, _, _ := newTestClient(t)
	if _, err := c.RunHook(t.Context(), nil, time.Second); err == nil {
		t.Fatal("want error")
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 600) + "END"
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"", 0, ""},
		{"line1\nline2\r\n\ttab  ", 0, "line1 line2 tab"},
		{"\x1b[31mred\x1b[0m\x00\u202e", 0, "[31mred[0m"},
		{long, 0, "…" + strings.Repeat("x", 509) + "END"},
		{"aé", 2, "…é"},
		{"éa", 2, "…a"}, // the cut split é: its tail byte is dropped
		{"a\xffb", 0, "ab"},
	}
	for _, tc := range tests {
		got := Tail([]byte(tc.in), tc.n)
		if got != tc.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("Tail(%q) not valid UTF-8", tc.in)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
