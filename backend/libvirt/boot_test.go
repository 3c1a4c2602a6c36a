package libvirt

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// bootAgent is a qemu-ga whose image has the booted hook: run n (from 1)
// ends as exits(n) says, with its stdout. Everything else is absent.
type bootAgent struct {
	mu    sync.Mutex
	runs  int
	next  int64
	procs map[int64][2]string // pid -> exit code, stdout
	exits func(n int) (int, string)
	onRun func(n int) // called (unlocked) as run n starts
}

func (a *bootAgent) Command(_ context.Context, req []byte, _ time.Duration) ([]byte, error) {
	var r struct {
		Execute   string `json:"execute"`
		Arguments struct {
			Path string `json:"path"`
			PID  int64  `json:"pid"`
		} `json:"arguments"`
	}
	if err := json.Unmarshal(req, &r); err != nil {
		return nil, err
	}
	ret := func(v any) ([]byte, error) { return json.Marshal(map[string]any{"return": v}) }
	switch r.Execute {
	case "guest-ping":
		return ret(map[string]any{})
	case "guest-exec":
		if r.Arguments.Path != guestagent.DefaultBootedHook {
			return nil, &guestagent.AgentError{Desc: "Failed to execute child process (No such file or directory)"}
		}
		a.mu.Lock()
		a.runs++
		n := a.runs
		a.next++
		pid := a.next
		code, out := a.exits(n)
		a.procs[pid] = [2]string{itoa(code), out}
		a.mu.Unlock()
		if a.onRun != nil {
			a.onRun(n)
		}
		return ret(map[string]any{"pid": pid})
	case "guest-exec-status":
		a.mu.Lock()
		defer a.mu.Unlock()
		p := a.procs[r.Arguments.PID]
		return []byte(`{"return":{"exited":true,"exitcode":` + p[0] + `,"out-data":"` +
			base64.StdEncoding.EncodeToString([]byte(p[1])) + `"}}`), nil
	}
	return nil, &guestagent.AgentError{Class: "CommandNotFound", Desc: r.Execute}
}

func bootBackend(t *testing.T, a *bootAgent) (*Backend, *syncBuffer) {
	t.Helper()
	a.procs = map[int64][2]string{}
	b, logs := newTestBackend(t, func(c *Config) {
		c.WaitBooted = true
		c.Booted = guestagent.BootedConfig{PollStart: time.Millisecond, PollMax: 5 * time.Millisecond}
	})
	b.transport = func(*host, string) guestagent.Transport { return a }
	return b, logs
}

// TestCreateWaitsForBooted: with WaitBooted a Create returns only once the
// booted hook exits 0, showing "booting" with the hook's reason meanwhile.
func TestCreateWaitsForBooted(t *testing.T) {
	t.Parallel()
	var seen []backend.BootStatus
	var b *Backend
	a := &bootAgent{exits: func(n int) (int, string) {
		if n < 4 {
			return 75, "init done\nwaiting for bigfleet.boot_delay (3s left)\n"
		}
		return 0, ""
	}}
	a.onRun = func(n int) {
		if st, ok := b.BootStatus("m1"); ok {
			seen = append(seen, st)
		}
	}
	b, _ = bootBackend(t, a)
	mustCreate(t, b, "m1")
	if a.runs != 4 {
		t.Fatalf("hook runs = %d, want 4 (Create returned before the hook said booted)", a.runs)
	}
	if len(seen) < 3 || seen[2].Phase != backend.BootBooting || seen[2].Reason != "waiting for bigfleet.boot_delay (3s left)" {
		t.Fatalf("BootStatus while booting = %+v", seen)
	}
	if st, ok := b.BootStatus("m1"); ok {
		t.Fatalf("BootStatus after the boot = %+v, want none", st)
	}
}

// TestCreateBootFailedKeepsDomain: a hook that says the boot failed ends
// the Create with its cause (and a WARN); the domain stays for a Delete.
func TestCreateBootFailedKeepsDomain(t *testing.T) {
	t.Parallel()
	a := &bootAgent{exits: func(int) (int, string) { return 1, "unit kubelet-prep.service failed\n" }}
	b, logs := bootBackend(t, a)
	c := testConn(t, b, "z1")
	_, err := b.Create(context.Background(), spec("m1"))
	if err == nil || err.Error() != "create: boot failed: unit kubelet-prep.service failed" || backend.IsTransient(err) {
		t.Fatalf("Create = %v, want the boot failure, not transient", err)
	}
	if !guestagent.IsBootFailed(err) {
		t.Error("the error does not say the boot failed")
	}
	if !domainExists(t, c, meta.DomainName(b.cfg.Provider, "m1")) {
		t.Error("the domain was removed")
	}
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"guest did not boot"`) {
		t.Errorf("no WARN line:\n%s", logs)
	}
}

// TestStartShowsBootingUntilBooted: a guest reconcile starts again shows
// "booting" until its booted check passes.
func TestStartShowsBootingUntilBooted(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	a := &bootAgent{exits: func(n int) (int, string) { return 0, "" }}
	b, _ := bootBackend(t, a)
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	a.onRun = func(int) { <-release }
	if err := onDomain(lvc(c), pl.Domain, domstate.Destroy); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background(), "m1", pl); err != nil {
		t.Fatal(err)
	}
	if st, ok := b.BootStatus("m1"); !ok || st.Phase != backend.BootBooting {
		t.Fatalf("BootStatus after a restart = %+v, %v; want booting", st, ok)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := b.BootStatus("m1"); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("still booting after the hook said booted")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
