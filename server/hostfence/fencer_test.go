package hostfence

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

type declared struct{ host, reason, by string }

type fakeDeclarer struct {
	mu   sync.Mutex
	got  []declared
	fail error
}

func (d *fakeDeclarer) DeclareDown(_ context.Context, host, reason, by string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail != nil {
		return d.fail
	}
	d.got = append(d.got, declared{host, reason, by})
	return nil
}

func (d *fakeDeclarer) list() []declared {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]declared(nil), d.got...)
}

// rig is a Fencer on a hand-driven clock and host list, with a recorded
// command.
type rig struct {
	f     *Fencer
	now   time.Time
	hosts []backend.HostStatus
	dec   *fakeDeclarer
	mu    sync.Mutex
	runs  [][]string // args of each run
	exit  error
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{now: time.Unix(1_800_000_000, 0), dec: &fakeDeclarer{}}
	r.hosts = []backend.HostStatus{
		{Name: "h1", Zone: "z", Connected: true},
		{Name: "h2", Zone: "z", Connected: true},
	}
	f, err := New(Config{Command: "/fence", After: time.Minute, Timeout: time.Second,
		Hosts:   func(context.Context) []backend.HostStatus { return r.hosts },
		Declare: r.dec, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	f.cfg.now = func() time.Time { return r.now }
	f.cfg.run = func(_ context.Context, path string, env, args []string) ([]byte, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.runs = append(r.runs, append([]string{path}, append(args, env...)...))
		return []byte("powered off"), r.exit
	}
	r.f = f
	return r
}

// step advances the clock by d and runs one tick to its end.
func (r *rig) step(d time.Duration) {
	r.now = r.now.Add(d)
	r.f.tick(context.Background())
	r.f.wg.Wait()
}

func (r *rig) set(name string, connected bool) {
	for i := range r.hosts {
		if r.hosts[i].Name == name {
			r.hosts[i].Connected = connected
		}
	}
}

func (r *rig) nruns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

func TestFencesOnlyAfterTheDelayAndThenDeclares(t *testing.T) {
	r := newRig(t)
	r.set("h2", false)
	r.step(0) // first seen unreachable
	r.step(59 * time.Second)
	if r.nruns() != 0 {
		t.Fatalf("fenced after 59s of a 1m delay")
	}
	r.step(time.Second)
	if r.nruns() != 1 {
		t.Fatalf("runs = %d after the delay, want 1", r.nruns())
	}
	got := r.dec.list()
	if len(got) != 1 || got[0].host != "h2" || got[0].by != By || !strings.Contains(got[0].reason, "fenced by fence after 1m0s unreachable") {
		t.Fatalf("declared %+v", got)
	}
	want := []string{"/fence", "z", "h2", "BIGFLEET_ZONE=z", "BIGFLEET_HOST=h2", "BIGFLEET_HOST_URI="}
	if strings.Join(r.runs[0], " ") != strings.Join(want, " ") {
		t.Fatalf("command run as %q, want %q", r.runs[0], want)
	}
}

// A standby (Acting false) never runs the command, however long a host
// is out; once it acts, the outage is timed from then.
func TestOnlyTheActingProcessFences(t *testing.T) {
	r := newRig(t)
	acting := false
	r.f.cfg.Acting = func() bool { return acting }
	r.set("h2", false)
	r.step(0)
	r.step(2 * time.Minute)
	if r.nruns() != 0 {
		t.Fatalf("a standby ran the fence command %d times", r.nruns())
	}
	acting = true
	r.step(time.Second) // first seen unreachable while acting
	r.step(59 * time.Second)
	if r.nruns() != 0 {
		t.Fatalf("fenced %s after it started acting, before the 1m delay", 59*time.Second)
	}
	r.step(time.Second)
	if r.nruns() != 1 || len(r.dec.list()) != 1 {
		t.Fatalf("runs = %d, declared %v once acting past the delay; want 1 and 1", r.nruns(), r.dec.list())
	}
}

func TestAnswerEndsTheEpisode(t *testing.T) {
	r := newRig(t)
	r.set("h2", false)
	r.step(0)
	r.step(50 * time.Second)
	r.set("h2", true) // back before the delay
	r.step(5 * time.Second)
	r.set("h2", false) // out again: a new episode starts now
	r.step(5 * time.Second)
	r.step(50 * time.Second)
	if r.nruns() != 0 {
		t.Fatalf("fenced although no single outage lasted the delay")
	}
	r.step(10 * time.Second)
	if r.nruns() != 1 {
		t.Fatalf("runs = %d after a whole delay, want 1", r.nruns())
	}
}

func TestNeverFencesWhenNoOtherHostAnswers(t *testing.T) {
	r := newRig(t)
	r.set("h1", false)
	r.set("h2", false)
	r.step(0)
	r.step(10 * time.Minute)
	if r.nruns() != 0 {
		t.Fatalf("fenced while no host answered: the provider's own network may be down")
	}
	r.set("h1", true) // one answers: h2 alone is out
	r.step(time.Minute)
	if r.nruns() != 1 || r.dec.list()[0].host != "h2" {
		t.Fatalf("runs %v, declared %v: want h2 fenced once h1 answers", r.runs, r.dec.list())
	}
}

func TestDeclaredDownHostIsNotFencedAgain(t *testing.T) {
	r := newRig(t)
	r.set("h2", false)
	r.hosts[1].Down = true
	r.step(0)
	r.step(time.Hour)
	if r.nruns() != 0 {
		t.Fatalf("a host already declared down was fenced")
	}
}

func TestFailedCommandDeclaresNothingAndRetriesAfterTheDelay(t *testing.T) {
	r := newRig(t)
	r.exit = errors.New("exit status 1")
	r.set("h2", false)
	r.step(0)
	r.step(time.Minute)
	if r.nruns() != 1 || len(r.dec.list()) != 0 {
		t.Fatalf("runs %d declared %v: a failed command must declare nothing", r.nruns(), r.dec.list())
	}
	r.step(30 * time.Second)
	if r.nruns() != 1 {
		t.Fatalf("retried %d times within the delay", r.nruns()-1)
	}
	r.exit = nil
	r.step(30 * time.Second)
	if r.nruns() != 2 || len(r.dec.list()) != 1 {
		t.Fatalf("runs %d declared %v: want a second run after the delay, declaring", r.nruns(), r.dec.list())
	}
}

func TestFailedDeclarationIsRetried(t *testing.T) {
	r := newRig(t)
	r.dec.fail = errors.New("disk full")
	r.set("h2", false)
	r.step(0)
	r.step(time.Minute)
	r.dec.fail = nil
	r.step(time.Minute)
	if r.nruns() != 2 || len(r.dec.list()) != 1 {
		t.Fatalf("runs %d declared %v: want the declaration retried with the command", r.nruns(), r.dec.list())
	}
}

func TestNewRefusesARelativeCommand(t *testing.T) {
	_, err := New(Config{Command: "fence.sh", After: time.Minute,
		Hosts: func(context.Context) []backend.HostStatus { return nil }, Declare: &fakeDeclarer{}})
	if err == nil || !strings.Contains(err.Error(), "absolute path") {
		t.Fatalf("err = %v", err)
	}
}

// The real runner: output and exit status, the environment, and a
// command past its bound killed with its children.
func TestRunCommand(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := script("ok", `echo "off $1 $2 $BIGFLEET_HOST"`)
	out, err := runCommand(context.Background(), ok, []string{"BIGFLEET_HOST=h9"}, []string{"z", "h9"})
	if err != nil || strings.TrimSpace(string(out)) != "off z h9 h9" {
		t.Fatalf("ok: %q %v", out, err)
	}
	_, err = runCommand(context.Background(), script("fail", "echo no >&2; exit 3"), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("fail: %v", err)
	}
	pidFile := filepath.Join(dir, "child.pid")
	slow := script("slow", "sleep 30 & echo $! >"+pidFile+"; wait")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err = runCommand(ctx, slow, nil, nil)
	if err == nil || time.Since(t0) > 10*time.Second {
		t.Fatalf("slow: err %v after %s, want killed at the bound", err, time.Since(t0))
	}
	pid, _ := os.ReadFile(pidFile)
	if p := strings.TrimSpace(string(pid)); p != "" {
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, err := os.Stat("/proc/" + p); err != nil {
				break
			}
			if st, _ := os.ReadFile("/proc/" + p + "/stat"); strings.Contains(string(st), ") Z ") {
				break // a zombie: killed, not reaped by its dead parent yet
			}
			if time.Now().After(deadline) {
				t.Fatalf("the command's child %s outlived the bound", p)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func TestTail(t *testing.T) {
	long := strings.Repeat("x", 2000) + "END"
	if got := tail([]byte(long)); len(got) > 520 || !strings.HasSuffix(got, "END") || !strings.HasPrefix(got, "…") {
		t.Fatalf("tail = %d bytes %q…", len(got), got[:10])
	}
}
