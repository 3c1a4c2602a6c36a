package libvirt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/guestagent/agenttest"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/guest"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// bootAgent is agenttest's qemu-ga with the booted hook.
type bootAgent = agenttest.Booting

func bootBackend(t *testing.T, a *bootAgent) (*Backend, *syncBuffer) {
	t.Helper()
	b, logs := newTestBackend(t, func(c *Config) {
		c.WaitBooted = true
		c.Booted = guestagent.BootedConfig{PollStart: time.Millisecond, PollMax: 5 * time.Millisecond}
	})
	b.guests.Transport = func(guest.Target) guestagent.Transport { return a }
	return b, logs
}

// TestCreateWaitsForBooted: with WaitBooted a Create returns only once the
// booted hook exits 0, showing "booting" with the hook's reason meanwhile.
func TestCreateWaitsForBooted(t *testing.T) {
	t.Parallel()
	var seen []backend.BootStatus
	var b *Backend
	a := &bootAgent{Exits: func(n int) (int, string) {
		if n < 4 {
			return 75, "init done\nwaiting for bigfleet.boot_delay (3s left)\n"
		}
		return 0, ""
	}}
	a.OnRun = func(n int) {
		if st, ok := b.BootStatus("m1"); ok {
			seen = append(seen, st)
		}
	}
	b, _ = bootBackend(t, a)
	mustCreate(t, b, "m1")
	if a.Runs != 4 {
		t.Fatalf("hook runs = %d, want 4 (Create returned before the hook said booted)", a.Runs)
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
	a := &bootAgent{Exits: func(int) (int, string) { return 1, "unit kubelet-prep.service failed\n" }}
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

// restartedGuest creates m1 (booted at once), stops its domain and starts
// it again, the way reconcile does; later hook runs end as exits says.
func restartedGuest(t *testing.T, exits func(n int) (int, string)) (*Backend, *bootAgent, backend.Placement) {
	t.Helper()
	a := &bootAgent{Rest: newFakeAgent()}
	a.Exits = func(n int) (int, string) {
		if n == 1 {
			return 0, "" // the Create's check
		}
		return exits(n)
	}
	b, _ := bootBackend(t, a)
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	if err := onDomain(lvc(c), pl.Domain, domstate.Destroy); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background(), "m1", pl); err != nil {
		t.Fatal(err)
	}
	return b, a, pl
}

// TestDeleteEndsTheBootWatch: a Delete of a machine whose restarted guest
// is still booting ends the background check and drops its status, rather
// than polling a gone guest until --create-timeout.
func TestDeleteEndsTheBootWatch(t *testing.T) {
	t.Parallel()
	b, _, pl := restartedGuest(t, func(int) (int, string) { return 75, "waiting for ever" })
	if st, ok := b.BootStatus("m1"); !ok || st.Phase != backend.BootBooting {
		t.Fatalf("BootStatus after a restart = %+v, %v; want booting", st, ok)
	}
	if err := b.Delete(context.Background(), backend.DeleteSpec{MachineID: "m1", Zone: "z1", Placement: pl}); err != nil {
		t.Fatal(err)
	}
	if st, ok := b.BootStatus("m1"); ok {
		t.Fatalf("BootStatus after the Delete = %+v; want none", st)
	}
	if b.guests.Watching("m1") {
		t.Fatal("the boot watch of m1 still runs after its Delete")
	}
}

// TestCreateStartsAGuestThatStoppedWhileBooting: a domain that stops while
// its Create waits for the boot (the host rebooted) ends the wait at once
// with a transient error naming the state, and the engine's retry of the
// Create starts it again and sees it boot, instead of waiting out the
// deadline and failing a machine that is fine.
func TestCreateStartsAGuestThatStoppedWhileBooting(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	restarted := false
	var c *libvirt.Connect
	var b *Backend
	a := &bootAgent{Exits: func(int) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if restarted {
			return 0, ""
		}
		return 75, "waiting for kubelet-prep.service\n"
	}}
	a.OnRun = func(n int) {
		if n == 2 {
			if err := onDomain(lvc(c), meta.DomainName(b.cfg.Provider, "m1"), domstate.Destroy); err != nil {
				t.Error(err)
			}
		}
	}
	b, logs := bootBackend(t, a)
	b.guests.StoppedEvery = 10 * time.Millisecond
	c = testConn(t, b, "z1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	t0 := time.Now()
	_, err := b.Create(ctx, spec("m1"))
	if err == nil || !backend.IsTransient(err) || !errors.Is(err, guest.ErrStoppedBooting) || !strings.Contains(err.Error(), "shut off") {
		t.Fatalf("Create = %v, want a transient error saying the domain is shut off", err)
	}
	if took := time.Since(t0); took > 10*time.Second {
		t.Fatalf("Create took %s to see its domain stopped", took)
	}
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"guest stopped while it booted; the call runs again`) {
		t.Errorf("no WARN line:\n%s", logs)
	}
	mu.Lock()
	restarted = true
	mu.Unlock()
	pl, err := b.Create(ctx, spec("m1")) // the engine's retry
	if err != nil {
		t.Fatalf("the retried Create: %v", err)
	}
	if !isActive(t, c, pl.Domain) {
		t.Fatal("after the retried Create the domain is not active, want started again")
	}
}

// TestConfigureStartsAStoppedDomain: a Configure of an IDLE machine whose
// domain is shut off (its host rebooted) starts it, as the next reconcile
// would, waits for the boot and binds it, with a WARN; a domain paused by
// a user still fails at once, not started.
func TestConfigureStartsAStoppedDomain(t *testing.T) {
	t.Parallel()
	a := &bootAgent{Rest: newFakeAgent(), Exits: func(int) (int, string) { return 0, "" }}
	b, logs := bootBackend(t, a)
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	if err := onDomain(lvc(c), pl.Domain, domstate.Destroy); err != nil {
		t.Fatal(err)
	}
	// Issue 38 case 1: without the arbiter's word the stopped copy may be a
	// migration's stale source; it is never started.
	refused := configureSpec(pl, "m1", "c1", []byte("blob"))
	refused.WhyNotStart = fmt.Errorf("starting m1's stopped domain waits for host(s) b: %w", backend.ErrTransient)
	err := b.Configure(context.Background(), refused)
	if !errors.Is(err, backend.ErrNotRunning) || !backend.IsTransient(err) || !strings.Contains(err.Error(), "waits for host(s) b") {
		t.Fatalf("Configure without MayStart = %v, want not running, transient, naming the hosts waited for", err)
	}
	if isActive(t, c, pl.Domain) {
		t.Fatal("a Configure without MayStart started the domain")
	}
	allowed := configureSpec(pl, "m1", "c1", []byte("blob"))
	allowed.MayStart = true
	if err := b.Configure(context.Background(), allowed); err != nil {
		t.Fatalf("Configure of a shut off domain: %v", err)
	}
	if !isActive(t, c, pl.Domain) {
		t.Fatal("after the Configure the domain is not active")
	}
	dom, err := c.LookupDomainByName(pl.Domain)
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Free()
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"configure: the domain was not running; starting it again"`) {
		t.Errorf("no WARN line:\n%s", logs)
	}
	if md := readMD(t, c, pl.Domain); md.ClusterID != "c1" {
		t.Fatalf("binding %q after the Configure, want c1", md.ClusterID)
	}
	if err := dom.Suspend(); err != nil {
		t.Fatal(err)
	}
	err = b.Configure(context.Background(), configureSpec(pl, "m1", "c2", []byte("blob")))
	if !errors.Is(err, backend.ErrNotRunning) || backend.IsTransient(err) {
		t.Fatalf("Configure of a paused domain = %v, want ErrNotRunning at once", err)
	}
}
