package hostconn

import (
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestDefaultPort(t *testing.T) {
	for scheme, want := range map[string]string{
		"qemu+tls": "16514", "qemu+tcp": "16509", "qemu+libssh": "22", "qemu+libssh2": "22",
		"qemu+ssh": "", "qemu+unix": "", "qemu": "", "test": "",
	} {
		if got := defaultPort(scheme); got != want {
			t.Errorf("defaultPort(%q) = %q, want %q", scheme, got, want)
		}
	}
}

// The socket timeouts land on this process's sockets to the URI's host
// and port, and on no other.
func TestSetLinkTimeoutsFindsTheSocket(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	dial := func(l net.Listener) *net.TCPConn {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.TCPConn)
	}
	mine, theirs := dial(lis), dial(other)
	port := lis.Addr().(*net.TCPAddr).Port
	n, err := setLinkTimeouts("qemu+tls://127.0.0.1:"+strconv.Itoa(port)+"/system", 30*time.Second, dialWindow{})
	if err != nil || n != 1 {
		t.Fatalf("setLinkTimeouts = %d, %v; want 1 socket", n, err)
	}
	if got := userTimeout(t, mine); got != 30000 {
		t.Errorf("TCP_USER_TIMEOUT on the host's socket = %d ms, want 30000", got)
	}
	if got := userTimeout(t, theirs); got != 0 {
		t.Errorf("TCP_USER_TIMEOUT on another socket = %d ms, want untouched", got)
	}
}

func userTimeout(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return v
}
