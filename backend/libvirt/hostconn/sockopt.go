package hostconn

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// setLinkTimeouts sets TCP_USER_TIMEOUT (and TCP keepalive) on this
// process's sockets connected to the host of uri, and returns how many it
// set. libvirt opens its sockets itself and exposes none, so they are
// found in /proc/self/fd: by their peer address among the URI's resolved
// ones, or, for a socket the dial itself opened (win), by the URI's port
// alone (the name has another address, or libssh went through a
// ProxyJump). A socket the dial opened counts only when no other host
// dialled at the same time, so a socket of another host's connection is
// never tuned. A socket that closes and whose number is reused meanwhile
// is checked again by its peer right before it is set: only a libvirt
// connection to the same host:port can match, and the timeout is as right
// for it.
func setLinkTimeouts(uri string, timeout time.Duration, win dialWindow) (int, error) {
	host, port, err := uriHostPort(uri)
	if err != nil {
		return 0, err
	}
	peers, rerr := resolvePeers(host, port)
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
		link, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(link, "socket:") {
			continue
		}
		got, ok := peerOf(fd)
		if !ok {
			continue
		}
		ours := slices.Contains(peers, got) ||
			(!win.overlapped && win.fresh[link] && got.Port() == port)
		if !ours {
			continue
		}
		if err := setTimeouts(fd, timeout); err == nil {
			n++
		}
	}
	if n == 0 && rerr != nil {
		return 0, rerr
	}
	return n, nil
}

// linkState is whether a host's connection has the socket timeouts:
// HostStatus.LinkTimeouts.
type linkState string

const (
	linkLocal   linkState = ""        // not a network transport (or not connected yet)
	linkTuned   linkState = "set"     // its socket has TCP_USER_TIMEOUT
	linkUntuned linkState = "missing" // a network transport whose socket could not be found
)

// networkURI: the URI reaches its daemon over the network (a host name
// and a transport other than unix or ext).
func networkURI(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return false
	}
	_, transport, _ := strings.Cut(u.Scheme, "+")
	return transport != "unix" && transport != "ext"
}

// sshChild: the transport runs ssh as a child process, whose socket is
// not this process's.
func sshChild(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	_, transport, _ := strings.Cut(u.Scheme, "+")
	return transport == "ssh"
}

// uriHostPort is the host name and port a network URI connects to.
func uriHostPort(raw string) (string, uint16, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", 0, err
	}
	port := u.Port()
	if port == "" {
		port = defaultPort(u.Scheme)
		if _, transport, _ := strings.Cut(u.Scheme, "+"); transport == "" && u.Hostname() != "" {
			port = "16514" // a remote URI without a transport is TLS
		}
	}
	if port == "" || u.Hostname() == "" {
		return "", 0, fmt.Errorf("not a network transport")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, err
	}
	return u.Hostname(), uint16(p), nil
}

// resolvePeers resolves the addresses host:port stands for.
func resolvePeers(host string, port uint16) ([]netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	out := make([]netip.AddrPort, 0, len(ips))
	for _, ip := range ips {
		out = append(out, netip.AddrPortFrom(ip.Unmap(), port))
	}
	return out, nil
}

// dialWindow is what one dial opened: the sockets that appeared in
// /proc/self/fd while it ran ("socket:[inode]"), and whether another
// host's dial ran at the same time (then they may be that host's).
type dialWindow struct {
	fresh      map[string]bool
	overlapped bool
}

// dialing is every dial in progress in this process.
var dialing struct {
	sync.Mutex
	active map[*dialTrack]bool
}

type dialTrack struct {
	before     map[string]bool
	overlapped bool // under dialing's lock
}

// beginDial notes the sockets open before a dial.
func beginDial() *dialTrack {
	d := &dialTrack{before: socketLinks()}
	dialing.Lock()
	defer dialing.Unlock()
	if dialing.active == nil {
		dialing.active = map[*dialTrack]bool{}
	}
	for o := range dialing.active {
		o.overlapped, d.overlapped = true, true
	}
	dialing.active[d] = true
	return d
}

// end returns what the dial opened.
func (d *dialTrack) end() dialWindow {
	after := socketLinks()
	dialing.Lock()
	delete(dialing.active, d)
	overlapped := d.overlapped
	dialing.Unlock()
	fresh := map[string]bool{}
	for l := range after {
		if !d.before[l] {
			fresh[l] = true
		}
	}
	return dialWindow{fresh: fresh, overlapped: overlapped}
}

// socketLinks is the set of this process's sockets ("socket:[inode]").
func socketLinks() map[string]bool {
	out := map[string]bool{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return out
	}
	for _, e := range ents {
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(link, "socket:") {
			out[link] = true
		}
	}
	return out
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

// peerOf is the TCP peer of socket fd.
func peerOf(fd int) (netip.AddrPort, bool) {
	sa, err := unix.Getpeername(fd)
	if err != nil {
		return netip.AddrPort{}, false
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), true
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port)), true
	}
	return netip.AddrPort{}, false
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
