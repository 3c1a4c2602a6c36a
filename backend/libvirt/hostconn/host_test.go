package hostconn

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// nodeURI is a private test-driver world (the backend's testdata): every
// connection to a file URI gets its own copy of node.xml.
func nodeURI(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs("../testdata/node.xml")
	if err != nil {
		t.Fatal(err)
	}
	return "test://" + p
}

// newTestHost starts a host on uri with the backend's defaults and short
// reconnect pauses, and waits for its first connection attempt.
func newTestHost(t testing.TB, uri string, dial virt.DialFunc) *Host {
	t.Helper()
	StartEventLoop(slog.Default())
	h := New(Config{Zone: "z1", Name: "z1", URI: uri, Dial: dial, Pool: "bigfleet", ProbeName: "bf-test-kvm-probe",
		CallTimeout: 30 * time.Second, AgentTimeout: time.Second, MigrateTimeout: time.Minute,
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
		KeepAliveSecs: 5, KeepAliveCount: 3})
	h.Start()
	t.Cleanup(h.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-h.FirstAttempt():
	case <-ctx.Done():
		t.Fatal("host still on its first connection attempt after 10s")
	}
	return h
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

func TestObserveDropsDeadConnectionOnly(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, nodeURI(t), nil)
	conn, err := h.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(conn)
	// A connection error on a connection that is still alive is not a loss.
	h.observe(conn, libvirt.Error{Code: libvirt.ERR_SYSTEM_ERROR, Message: "cannot access file"})
	if h.Ready() != nil {
		t.Fatal("dropped a live connection")
	}
	h.observe(conn, libvirt.Error{Code: libvirt.ERR_NO_DOMAIN})
	if h.Ready() != nil {
		t.Fatal("dropped on a lookup miss")
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
	orig, err := os.ReadFile("../testdata/node.xml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "node.xml")
	if err := os.WriteFile(file, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	var uris []string
	var mu sync.Mutex
	h := newTestHost(t, "test://"+file, func(uri string) (virt.Conn, error) {
		mu.Lock()
		uris = append(uris, uri)
		mu.Unlock()
		return virt.Dial(uri)
	})
	if got := bridgeName(t, h); got != "virbr0" {
		t.Fatalf("bridge before rotation = %q", got)
	}
	rotated := strings.Replace(string(orig), `<bridge name="virbr0"/>`, `<bridge name="virbr9"/>`, 1)
	if err := os.WriteFile(file, []byte(rotated), 0o600); err != nil {
		t.Fatal(err)
	}
	conn, err := h.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	h.Drop(conn, "simulated loss")
	h.Release(conn)
	waitFor(t, 5*time.Second, func() bool { return h.Ready() == nil })
	if got := bridgeName(t, h); got != "virbr9" {
		t.Fatalf("bridge after reconnect = %q: the file was not re-read", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(uris) < 2 || uris[0] != uris[len(uris)-1] || uris[0] != "test://"+file {
		t.Fatalf("dialled %q, want the configured URI each time", uris)
	}
}

func bridgeName(t *testing.T, h *Host) string {
	t.Helper()
	conn, err := h.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(conn)
	net, err := virt.Libvirt(Unwrap(conn)).LookupNetworkByName("default")
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
