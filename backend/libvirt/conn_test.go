package libvirt

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// Credential-looking parts of URIs that must never reach a log or an error.
const (
	secretSocket = "qemu+unix:///system?socket=/nonexistent/secret-sock&keyfile=/secret/unix-key"
	secretSSH    = "qemu+libssh://admin@127.0.0.1:1/system?keyfile=/secret/id_ed25519&known_hosts=/secret/known_hosts"
)

func TestDownHostsDoNotStopOthersAndStayRedacted(t *testing.T) {
	t.Parallel()
	b, logs := newTestBackend(t, func(c *Config) {
		c.Hosts = append(c.Hosts, Host{Zone: "sock", URI: secretSocket}, Host{Zone: "ssh", URI: secretSSH})
	})
	ctx := context.Background()
	var seen []string
	note := func(s string) { seen = append(seen, s) }

	if err := b.ZoneReady("z1"); err != nil {
		t.Fatalf("z1: %v", err)
	}
	for _, z := range []string{"sock", "ssh"} {
		err := b.ZoneReady(z)
		if !errors.Is(err, backend.ErrHostUnavailable) {
			t.Fatalf("%s ready: %v", z, err)
		}
		note(err.Error())
		_, err = b.Create(ctx, backend.MachineSpec{MachineID: "m-" + z, Zone: z, VCPU: 1, MemoryMiB: 64})
		if !errors.Is(err, backend.ErrHostUnavailable) || !strings.Contains(err.Error(), `zone "`+z+`"`) {
			t.Fatalf("%s create: %v", z, err)
		}
		note(err.Error())
	}
	if err := b.ZoneReady("nowhere"); !errors.Is(err, backend.ErrUnknownZone) {
		t.Fatalf("unknown zone: %v", err)
	}
	mustCreate(t, b, "m1") // the healthy host keeps working
	for _, zi := range b.Inventory(ctx) {
		if zi.Zone == "z1" && (zi.Err != nil || len(zi.Machines) != 1) {
			t.Fatalf("z1 inventory %+v", zi)
		}
		if zi.Zone != "z1" {
			if !errors.Is(zi.Err, backend.ErrHostUnavailable) {
				t.Fatalf("%s inventory err %v", zi.Zone, zi.Err)
			}
			note(zi.Err.Error())
		}
	}
	for _, hs := range b.Hosts(ctx) {
		note(hs.URI + " " + hs.LastError)
	}
	_ = b.Close()
	note(logs.String())
	all := strings.Join(seen, "\n")
	t.Log(all)
	for _, secret := range []string{"/secret/", "keyfile", "known_hosts=", "admin@", "secret-sock"} {
		if strings.Contains(all, secret) {
			t.Fatalf("%q leaked:\n%s", secret, all)
		}
	}
	if !strings.Contains(logs.String(), "libvirt host unreachable") {
		t.Fatalf("down hosts not logged:\n%s", logs)
	}
}

func TestReconnectsAfterLoss(t *testing.T) {
	t.Parallel()
	var dials, failNext atomic.Int32
	dial := func(uri string) (virt.Conn, error) {
		dials.Add(1)
		if failNext.Load() > 0 {
			failNext.Add(-1)
			return nil, libvirt.Error{Code: libvirt.ERR_SYSTEM_ERROR, Message: "Failed to connect socket"}
		}
		return virt.Dial(uri)
	}
	cfg := testConfig(t)
	b, err := newBackend(cfg, dial)
	if err != nil {
		t.Fatal(err)
	}
	awaitStarted(t, b)
	defer b.Close()
	h := b.loc.hosts["z1"]
	if h.Ready() != nil || dials.Load() != 1 {
		t.Fatalf("not up after start: dials=%d err=%v", dials.Load(), h.Ready())
	}
	failNext.Store(2)
	conn, err := h.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	h.Drop(conn, "simulated loss")
	if !errors.Is(h.Ready(), backend.ErrHostUnavailable) {
		t.Fatal("still ready after loss")
	}
	// The caller's reference stays valid (calls fail or succeed, no crash).
	_, _ = conn.GetLibVersion()
	h.Release(conn)
	waitFor(t, 5*time.Second, func() bool { return h.Ready() == nil })
	if n := dials.Load(); n != 4 {
		t.Fatalf("dials = %d, want 1 + 2 failed + 1", n)
	}
	mustCreate(t, b, "after-reconnect")
}

func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
