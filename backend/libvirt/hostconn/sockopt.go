package hostconn

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// setLinkTimeouts sets TCP_USER_TIMEOUT (and TCP keepalive) on this
// process's sockets connected to the host of uri, and returns how many it
// set. libvirt opens its sockets itself and exposes none, so they are
// found by their peer address in /proc/self/fd. A socket that closes and
// whose number is reused meanwhile is checked again by its peer right
// before it is set: only a libvirt connection to the same host:port can
// match, and the timeout is as right for it.
func setLinkTimeouts(uri string, timeout time.Duration) (int, error) {
	peers, err := uriPeers(uri)
	if err != nil {
		return 0, err
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(link, "socket:") {
			continue
		}
		if !peerIn(fd, peers) {
			continue
		}
		if err := setTimeouts(fd, timeout); err == nil {
			n++
		}
	}
	return n, nil
}

// uriPeers resolves the addresses a network URI connects to.
func uriPeers(raw string) ([]netip.AddrPort, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	port := u.Port()
	if port == "" {
		port = defaultPort(u.Scheme)
	}
	if port == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("not a network transport")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
	if err != nil {
		return nil, err
	}
	out := make([]netip.AddrPort, 0, len(ips))
	for _, ip := range ips {
		out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(p)))
	}
	return out, nil
}

// defaultPort is the port a transport connects to when the URI names none.
func defaultPort(scheme string) string {
	_, transport, _ := strings.Cut(scheme, "+")
	switch transport {
	case "tls":
		return "16514"
	case "tcp":
		return "16509"
	case "libssh", "libssh2":
		return "22"
	}
	return "" // unix, ssh (a child process's socket), ext: not ours to tune
}

func peerIn(fd int, peers []netip.AddrPort) bool {
	sa, err := unix.Getpeername(fd)
	if err != nil {
		return false
	}
	var got netip.AddrPort
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		got = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		got = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	default:
		return false
	}
	for _, p := range peers {
		if p == got {
			return true
		}
	}
	return false
}

// setTimeouts: the kernel aborts the connection once sent data has gone
// unacknowledged for timeout, and probes an idle one (so a dead peer is
// found without traffic too).
func setTimeouts(fd int, timeout time.Duration) error {
	secs := max(1, int(timeout/time.Second)/3)
	for _, o := range []struct{ level, opt, val int }{
		{unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(timeout / time.Millisecond)},
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, secs},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, secs},
		{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 3},
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.val); err != nil {
			return err
		}
	}
	return nil
}
