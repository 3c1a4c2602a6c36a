package hostconn

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// lockedBuffer is a log sink safe for the host's background loop.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// networkHost is a host whose URI names a network transport while dial
// reaches the test driver (after doing whatever else it wants).
func networkHost(t *testing.T, uri string, dial func()) (*Host, *lockedBuffer) {
	t.Helper()
	StartEventLoop(slog.Default())
	logs := &lockedBuffer{}
	world := nodeURI(t)
	h := New(Config{Zone: "z1", Name: "kvm-1", Named: true, URI: uri, Pool: "bigfleet", ProbeName: "bf-test-kvm-probe",
		Logger:      slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		CallTimeout: 7 * time.Second, AgentTimeout: time.Second, MigrateTimeout: time.Minute,
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond, KeepAliveSecs: 5, KeepAliveCount: 3,
		Dial: func(string) (virt.Conn, error) {
			if dial != nil {
				dial()
			}
			return virt.Dial(world)
		}})
	h.Start()
	t.Cleanup(h.Close)
	waitFor(t, 10*time.Second, func() bool { return h.Ready() == nil })
	return h, logs
}

func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// otherAddress listens on an address the URIs of these tests do not name
// (127.0.0.1 resolves to itself only): another A record of the host.
func otherAddress(t *testing.T) (net.Listener, int) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	t.Cleanup(func() { lis.Close() })
	return lis, lis.Addr().(*net.TCPAddr).Port
}

// A network host whose socket is not found runs without the TCP timeouts:
// that is said at WARN with what it costs, and shown in its status (the
// host_link_timeouts gauge), never only as a debug line.
func TestUntunedLinkIsReported(t *testing.T) {
	for _, uri := range []string{
		"qemu+tls://127.0.0.1:" + strconv.Itoa(closedPort(t)) + "/system",
		"qemu+ssh://root@127.0.0.1/system?keyfile=/secret/id",
	} {
		h, logs := networkHost(t, uri, nil)
		if got := h.Status().LinkTimeouts; got != "missing" {
			t.Errorf("%s: LinkTimeouts = %q, want missing", virt.Redact(uri), got)
		}
		l := logs.String()
		for _, want := range []string{`"level":"WARN"`, "runs without TCP timeouts", "keep their threads until TCP gives up", `"host":"kvm-1"`} {
			if !strings.Contains(l, want) {
				t.Errorf("%s: the log does not say %q:\n%s", virt.Redact(uri), want, l)
			}
		}
		if strings.HasPrefix(uri, "qemu+ssh") && !strings.Contains(l, "ssh child process") {
			t.Errorf("ssh host: the WARN does not say why:\n%s", l)
		}
	}
	local := newTestHost(t, nodeURI(t), nil)
	if got := local.Status().LinkTimeouts; got != "" {
		t.Errorf("a local host: LinkTimeouts = %q, want none", got)
	}
}

// The socket a dial opened to the URI's port is tuned even when its
// address is not one the URI's name resolves to (another A record, a
// ProxyJump): the TCP timeouts land on the socket libvirt actually opened.
func TestFreshSocketToURIPortIsTuned(t *testing.T) {
	lis, port := otherAddress(t)
	var opened *net.TCPConn
	h, _ := networkHost(t, "qemu+tls://127.0.0.1:"+strconv.Itoa(port)+"/system", func() {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(func() { c.Close() })
		opened = c.(*net.TCPConn)
	})
	if opened == nil {
		t.Fatal("the dial opened no socket")
	}
	if got := userTimeout(t, opened); got != 7000 {
		t.Errorf("TCP_USER_TIMEOUT on the socket the dial opened = %d ms, want 7000", got)
	}
	if got := h.Status().LinkTimeouts; got != "set" {
		t.Errorf("LinkTimeouts = %q, want set", got)
	}
}

// A socket matched by its port alone is tuned only when no other host
// dialled meanwhile (it may be that host's), and never one the dial did
// not open.
func TestPortOnlyMatchNeedsOwnDial(t *testing.T) {
	lis, port := otherAddress(t)
	uri := "qemu+tls://127.0.0.1:" + strconv.Itoa(port) + "/system"
	open := func() (*net.TCPConn, string) {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		tc := c.(*net.TCPConn)
		raw, _ := tc.SyscallConn()
		var link string
		_ = raw.Control(func(fd uintptr) { link, _ = os.Readlink("/proc/self/fd/" + strconv.Itoa(int(fd))) })
		return tc, link
	}
	other, _ := open()
	shared, link := open()
	if n, _ := setLinkTimeouts(uri, 5*time.Second, dialWindow{fresh: map[string]bool{link: true}, overlapped: true}); n != 0 {
		t.Errorf("tuned %d sockets of a dial that overlapped another's", n)
	}
	if got := userTimeout(t, shared); got != 0 {
		t.Errorf("a socket that may be another host's was tuned: %d ms", got)
	}
	if n, _ := setLinkTimeouts(uri, 5*time.Second, dialWindow{fresh: map[string]bool{link: true}}); n != 1 {
		t.Errorf("tuned %d sockets, want the dial's one", n)
	}
	if got := userTimeout(t, other); got != 0 {
		t.Errorf("a socket the dial did not open was tuned: %d ms", got)
	}
}
