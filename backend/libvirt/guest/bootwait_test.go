package guest

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/guestagent/agenttest"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// stoppedGuest is machine m1's domain, ours and shut off (its host
// rebooted), under --wait-booted, with a's booted hook.
func stoppedGuest(t *testing.T, a *agenttest.Booting) (*Guests, Target) {
	t.Helper()
	h := testHost(t)
	name := meta.DomainName(provider, "m1")
	defineDomain(t, h, name, &meta.Metadata{Provider: provider, MachineID: "m1"}, false)
	g := New(Config{Provider: provider, AgentTimeout: time.Second, WaitBooted: true, BootTimeout: time.Minute,
		Bootstrap: guestagent.BootstrapConfig{AgentWait: 300 * time.Millisecond, DrainMargin: 2 * time.Second},
		Booted:    guestagent.BootedConfig{PollStart: time.Millisecond, PollMax: 5 * time.Millisecond},
		Log:       slog.New(slog.DiscardHandler)})
	t.Cleanup(g.Close)
	g.Transport = func(Target) guestagent.Transport { return a }
	return g, Target{Host: h, Zone: "z1", Domain: name, MachineID: "m1"}
}

// A guest started again (as reconcile does) shows "booting" until its
// booted check passes, then nothing.
func TestStartShowsBootingUntilBooted(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	a := &agenttest.Booting{Exits: func(int) (int, string) { return 0, "" }, OnRun: func(int) { <-release }}
	g, tg := stoppedGuest(t, a)
	if err := g.Start(context.Background(), tg); err != nil {
		t.Fatal(err)
	}
	if !active(t, tg) {
		t.Fatal("Start left the domain shut off")
	}
	if st, ok := g.Status("m1"); !ok || st.Phase != backend.BootBooting || !g.Watching("m1") {
		t.Fatalf("Status after a restart = %+v, %v (watching %v); want booting, watched", st, ok, g.Watching("m1"))
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := g.Status("m1"); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("still booting after the hook said booted")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// bootstrapRan reports whether any command of the bootstrap ran (a kill
// is the superseded background check's hook run, stopped).
func bootstrapRan(e string) bool { return strings.HasPrefix(e, "exec ") && e != "exec /bin/kill" }

// A Configure of a guest started again runs the bootstrap hook only once
// the booted check passed, and leaves no boot status behind.
func TestConfigureWaitsForBootedAfterRestart(t *testing.T) {
	t.Parallel()
	a := &agenttest.Booting{Rest: agenttest.New(), Exits: func(n int) (int, string) {
		if n < 5 {
			return 75, "waiting for network-online.target\n"
		}
		return 0, ""
	}}
	g, tg := stoppedGuest(t, a)
	if err := g.Start(context.Background(), tg); err != nil {
		t.Fatal(err)
	}
	if err := g.Configure(context.Background(), tg, configureSpec("m1", "c1", []byte("blob"))); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	a.Mu.Lock()
	defer a.Mu.Unlock()
	first := slices.IndexFunc(a.Events, bootstrapRan)
	if first < 1 || a.Events[first-1] != "booted:0" || !slices.Contains(a.Events[:first], "booted:75") {
		t.Fatalf("events %q: want the bootstrap only after the hook said 75, then 0", a.Events)
	}
	if st, ok := g.Status("m1"); ok {
		t.Errorf("Status after Configure = %+v", st)
	}
}

// A guest started again whose boot failed fails the Configure with the
// cause; no bootstrap runs.
func TestConfigureOnFailedBootFails(t *testing.T) {
	t.Parallel()
	a := &agenttest.Booting{Rest: agenttest.New(), Exits: func(int) (int, string) { return 1, "unit kubelet-prep.service failed\n" }}
	g, tg := stoppedGuest(t, a)
	if err := g.Start(context.Background(), tg); err != nil {
		t.Fatal(err)
	}
	err := g.Configure(context.Background(), tg, configureSpec("m1", "c1", []byte("blob")))
	if err == nil || err.Error() != "configure: boot failed: unit kubelet-prep.service failed" {
		t.Fatalf("Configure = %v", err)
	}
	a.Mu.Lock()
	defer a.Mu.Unlock()
	if slices.ContainsFunc(a.Events, bootstrapRan) {
		t.Fatalf("the bootstrap ran on a guest whose boot failed: %q", a.Events)
	}
}

// A Configure that starts a stopped domain itself waits for the boot in
// its own wait: it leaves no background check running.
func TestConfigureStartingADomainLeavesNoWatch(t *testing.T) {
	t.Parallel()
	a := &agenttest.Booting{Rest: agenttest.New(), Exits: func(int) (int, string) { return 0, "" }}
	g, tg := stoppedGuest(t, a)
	spec := configureSpec("m1", "c1", []byte("blob"))
	spec.MayStart = true
	if err := g.Configure(context.Background(), tg, spec); err != nil {
		t.Fatalf("Configure of a shut off domain: %v", err)
	}
	if g.Watching("m1") {
		t.Fatal("a background boot check is left running after the Configure's own wait")
	}
	a.Mu.Lock()
	defer a.Mu.Unlock()
	if a.Runs != 1 {
		t.Fatalf("booted hook ran %d times, want once (the Configure's wait only)", a.Runs)
	}
}
