package libvirt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
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
	dial := func(uri string) (lvConn, error) {
		dials.Add(1)
		if failNext.Load() > 0 {
			failNext.Add(-1)
			return nil, libvirt.Error{Code: libvirt.ERR_SYSTEM_ERROR, Message: "Failed to connect socket"}
		}
		return dialLibvirt(uri)
	}
	cfg := testConfig(t)
	b, err := newBackend(cfg, dial)
	if err != nil {
		t.Fatal(err)
	}
	awaitStarted(t, b)
	defer b.Close()
	h := b.hosts["z1"]
	if h.ready() != nil || dials.Load() != 1 {
		t.Fatalf("not up after start: dials=%d err=%v", dials.Load(), h.ready())
	}
	failNext.Store(2)
	conn, err := h.acquire()
	if err != nil {
		t.Fatal(err)
	}
	h.drop(conn, "simulated loss")
	if !errors.Is(h.ready(), backend.ErrHostUnavailable) {
		t.Fatal("still ready after loss")
	}
	// The caller's reference stays valid (calls fail or succeed, no crash).
	_, _ = conn.GetLibVersion()
	h.release(conn)
	waitFor(t, 5*time.Second, func() bool { return h.ready() == nil })
	if n := dials.Load(); n != 4 {
		t.Fatalf("dials = %d, want 1 + 2 failed + 1", n)
	}
	mustCreate(t, b, "after-reconnect")
}

func TestObserveDropsDeadConnectionOnly(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	h := b.hosts["z1"]
	conn, err := h.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer h.release(conn)
	// A connection error on a connection that is still alive is not a loss.
	h.observe(conn, libvirt.Error{Code: libvirt.ERR_SYSTEM_ERROR, Message: "cannot access file"})
	if h.ready() != nil {
		t.Fatal("dropped a live connection")
	}
	h.observe(conn, libvirt.Error{Code: libvirt.ERR_NO_DOMAIN})
	if h.ready() != nil {
		t.Fatal("dropped on a lookup miss")
	}
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

// TestReconnectRereadsFilesNamedInURI: the provider caches no credential.
// Every (re)dial hands libvirt the URI as configured, and libvirt reads the
// files it names (keyfile, known_hosts, pkipath certificates) at connect
// time, so a rotated Secret takes effect at the next reconnect. The test
// driver's state file stands in for those files: changed on disk, its new
// content is what the reconnected backend sees.
func TestReconnectRereadsFilesNamedInURI(t *testing.T) {
	t.Parallel()
	orig, err := os.ReadFile("testdata/node.xml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "node.xml")
	if err := os.WriteFile(file, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Hosts = []Host{{Zone: "z1", URI: "test://" + file}}
	var uris []string
	var mu sync.Mutex
	b, err := newBackend(cfg, func(uri string) (lvConn, error) {
		mu.Lock()
		uris = append(uris, uri)
		mu.Unlock()
		return dialLibvirt(uri)
	})
	if err != nil {
		t.Fatal(err)
	}
	awaitStarted(t, b)
	defer b.Close()
	h := b.hosts["z1"]
	if got := bridgeName(t, h); got != "virbr0" {
		t.Fatalf("bridge before rotation = %q", got)
	}
	rotated := strings.Replace(string(orig), `<bridge name="virbr0"/>`, `<bridge name="virbr9"/>`, 1)
	if err := os.WriteFile(file, []byte(rotated), 0o600); err != nil {
		t.Fatal(err)
	}
	conn, err := h.acquire()
	if err != nil {
		t.Fatal(err)
	}
	h.drop(conn, "simulated loss")
	h.release(conn)
	waitFor(t, 5*time.Second, func() bool { return h.ready() == nil })
	if got := bridgeName(t, h); got != "virbr9" {
		t.Fatalf("bridge after reconnect = %q: the file was not re-read", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(uris) < 2 || uris[0] != uris[len(uris)-1] || uris[0] != "test://"+file {
		t.Fatalf("dialled %q, want the configured URI each time", uris)
	}
}

func bridgeName(t *testing.T, h *host) string {
	t.Helper()
	conn, err := h.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer h.release(conn)
	net, err := rawConn(conn).LookupNetworkByName("default")
	if err != nil {
		t.Fatal(err)
	}
	defer net.Free()
	name, err := net.GetBridgeName()
	if err != nil {
		t.Fatal(err)
	}
	return name
}
