//go:build lab

// The real thing: two network namespaces joined by a veth pair, netdelay
// bound in A and iptables queueing A's packets as a lab host's are.
// Needs root, ip(8) and iptables:
//
//	go test -tags lab -count=1 -v ./scripts/lab/netdelay
//
// NETDELAY_IPTABLES picks the iptables binary (iptables or
// iptables-legacy); without it the first that works is used.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	nsA, nsB     = "bfnd-a", "bfnd-b" // netdelay and the rules live in A
	vethA, vethB = "bfnd-va", "bfnd-vb"
	addrA, addrB = "198.18.99.1", "198.18.99.2"
	echoPort     = "7007"
	queueNum     = 99
	chain        = "BFND" // A's fault chain, hooked like the lab's BFLAB
	// rttDelay is what each test adds to a round trip through A's veth.
	rttDelay = 100 * time.Millisecond
)

// TestDelayIncoming queues A's incoming packets only, each held the whole
// rttDelay: round trips grow by rttDelay, on connections opened before
// the rules too, and bulk TCP keeps its speed. Removing the rules, or
// netdelay stopping or dying with them in place, restores the RTT.
func TestDelayIncoming(t *testing.T) {
	bin, ipt := setUp(t)
	before := dial(t) // established before any delay, and used throughout
	base := rtt(t, before, 9)
	t.Logf("RTT before: %v", base)

	nd := startNetdelay(t, bin, rttDelay)
	queueRules(t, ipt, "-i")
	delayed := rtt(t, before, 7)
	after := dial(t)
	fresh := rtt(t, after, 7)
	t.Logf("RTT with netdelay -delay %v on incoming packets: %v on the connection opened before, %v on a new one", rttDelay, delayed, fresh)
	assertDelayed(t, "connection opened before the rules", base, delayed)
	assertDelayed(t, "connection opened after the rules", base, fresh)
	// On the new connection: the old one's congestion control (BBR here)
	// still trusts the microseconds it measured and keeps a tiny window
	// for a while.
	if took := bulk(t, after, 8<<20, time.Minute); took > 15*time.Second {
		t.Errorf("8 MiB took %v through the delay", took)
	}

	ipt(t, "-F", chain)
	restored := rtt(t, before, 9)
	t.Logf("RTT after removing the rules: %v", restored)
	assertRestored(t, "rules removed", base, restored)

	// With the rules back, a netdelay that stops (cleanly, in the middle
	// of a transfer that must go on whole; then killed) must not partition
	// A: --queue-bypass lets the packets through.
	queueRules(t, ipt, "-i")
	assertDelayed(t, "rules back", base, rtt(t, before, 3))
	bulk(t, after, 64<<20, time.Minute, func() {
		if err := nd.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Error(err)
		}
	})
	nd.stop(t, syscall.SIGTERM)
	afterTerm := rtt(t, before, 5)
	t.Logf("RTT with the rules but netdelay stopped by SIGTERM: %v", afterTerm)
	assertRestored(t, "netdelay stopped", base, afterTerm)

	nd = startNetdelay(t, bin, rttDelay)
	assertDelayed(t, "netdelay restarted", base, rtt(t, before, 3))
	nd.stop(t, syscall.SIGKILL)
	afterKill := rtt(t, before, 5)
	t.Logf("RTT with the rules but netdelay killed: %v", afterKill)
	assertRestored(t, "netdelay killed", base, afterKill)
}

// TestDelayBothDirections queues both directions, each held rttDelay/2.
// Round trips grow by rttDelay all the same, but a packet held on its way
// out still counts against its sending socket, so TCP Small Queues lets
// a sender in A have only a couple of packets out per delay: bulk TCP
// crawls. Logged, not asserted: it is the kernel's doing.
func TestDelayBothDirections(t *testing.T) {
	bin, ipt := setUp(t)
	before := dial(t)
	base := rtt(t, before, 9)
	t.Logf("RTT before: %v", base)

	nd := startNetdelay(t, bin, rttDelay/2)
	queueRules(t, ipt, "-i", "-o")
	delayed := rtt(t, before, 7)
	after := dial(t)
	fresh := rtt(t, after, 7)
	t.Logf("RTT with netdelay -delay %v both ways: %v on the connection opened before, %v on a new one", rttDelay/2, delayed, fresh)
	assertDelayed(t, "connection opened before the rules", base, delayed)
	assertDelayed(t, "connection opened after the rules", base, fresh)
	bulk(t, after, 256<<10, time.Minute)

	ipt(t, "-F", chain)
	restored := rtt(t, before, 9)
	t.Logf("RTT after removing the rules: %v", restored)
	assertRestored(t, "rules removed", base, restored)
	nd.stop(t, syscall.SIGTERM)
}

// setUp builds netdelay and makes the namespaces, A's chain and B's echo
// server, all undone when the test ends.
func setUp(t *testing.T) (bin string, ipt iptablesFunc) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and iptables")
	}
	bin = buildNetdelay(t)
	makeNamespaces(t)
	ipt = pickIptables(t)
	startEcho(t)
	return bin, ipt
}

func assertDelayed(t *testing.T, what string, base, got time.Duration) {
	t.Helper()
	if grew := got - base; grew < rttDelay*9/10 || grew >= 4*rttDelay {
		t.Errorf("%s: RTT grew by %v (from %v to %v), want about %v", what, grew, base, got, rttDelay)
	}
}

func assertRestored(t *testing.T, what string, base, got time.Duration) {
	t.Helper()
	if got > base+rttDelay/5 {
		t.Errorf("%s: RTT %v, want about the %v it was before", what, got, base)
	}
}

// must runs a command and fails the test with its output if it fails.
func must(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func buildNetdelay(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "netdelay")
	must(t, "go", "build", "-o", bin, ".")
	return bin
}

// makeNamespaces makes A and B with the veth pair between them, made
// inside the namespaces so nothing touches the machine's own network.
// Deleting a namespace takes its veth end, its iptables rules and its
// nfqueue bindings with it.
func makeNamespaces(t *testing.T) {
	for _, ns := range []string{nsA, nsB} {
		_ = exec.Command("ip", "netns", "del", ns).Run() // a failed run's leftovers
		must(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		must(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	must(t, "ip", "-n", nsA, "link", "add", vethA, "type", "veth", "peer", "name", vethB, "netns", nsB)
	must(t, "ip", "-n", nsA, "addr", "add", addrA+"/24", "dev", vethA)
	must(t, "ip", "-n", nsB, "addr", "add", addrB+"/24", "dev", vethB)
	must(t, "ip", "-n", nsA, "link", "set", vethA, "up")
	must(t, "ip", "-n", nsB, "link", "set", vethB, "up")
}

type iptablesFunc func(t *testing.T, args ...string)

// pickIptables makes A's fault chain as lab.sh does (hooked into INPUT
// and OUTPUT) with the first iptables binary that can.
func pickIptables(t *testing.T) iptablesFunc {
	candidates := []string{"iptables", "iptables-legacy"}
	if b := os.Getenv("NETDELAY_IPTABLES"); b != "" {
		candidates = []string{b}
	}
	var tried []string
	for _, b := range candidates {
		out, err := exec.Command("ip", "netns", "exec", nsA, b, "-w", "-N", chain).CombinedOutput()
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v %s", b, err, out))
			continue
		}
		t.Logf("iptables binary: %s", b)
		ipt := func(t *testing.T, args ...string) {
			t.Helper()
			must(t, "ip", append([]string{"netns", "exec", nsA, b, "-w"}, args...)...)
		}
		ipt(t, "-I", "INPUT", "-j", chain)
		ipt(t, "-I", "OUTPUT", "-j", chain)
		return ipt
	}
	t.Fatalf("no iptables works in a namespace:\n%s", strings.Join(tried, "\n"))
	return nil
}

// queueRules queues A's veth in the directions given ("-i", "-o"), with
// the rules the lab puts on a host's eth0.
func queueRules(t *testing.T, ipt iptablesFunc, dirs ...string) {
	for _, d := range dirs {
		ipt(t, "-A", chain, d, vethA, "-j", "NFQUEUE", "--queue-num", fmt.Sprint(queueNum), "--queue-bypass")
	}
}

// netdelay is a running netdelay process in A.
type netdelay struct {
	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	stderr []string
}

// startNetdelay starts netdelay in A, as lab.sh does, and waits for its
// start line, which it prints once the queue is bound.
func startNetdelay(t *testing.T, bin string, delay time.Duration) *netdelay {
	cmd := exec.Command("ip", "netns", "exec", nsA, bin, "-queue", fmt.Sprint(queueNum), "-delay", delay.String())
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	nd := &netdelay{cmd: cmd, exited: make(chan struct{})}
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			nd.mu.Lock()
			nd.stderr = append(nd.stderr, sc.Text())
			if len(nd.stderr) == 1 {
				close(started)
			}
			nd.mu.Unlock()
		}
		_ = cmd.Wait()
		close(nd.exited)
	}()
	// ip netns exec execs netdelay itself, so this pid is netdelay's.
	t.Cleanup(func() {
		select {
		case <-nd.exited:
		default:
			_ = cmd.Process.Kill()
			<-nd.exited
		}
	})
	select {
	case <-started:
	case <-nd.exited:
		t.Fatalf("netdelay exited: %v", nd.lines())
	case <-time.After(10 * time.Second):
		t.Fatal("netdelay printed nothing in 10s")
	}
	if want := fmt.Sprintf("netdelay: queue %d, delay %v", queueNum, delay); nd.lines()[0] != want {
		t.Fatalf("netdelay says %q, want %q", nd.lines()[0], want)
	}
	return nd
}

func (nd *netdelay) lines() []string {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return slices.Clone(nd.stderr)
}

// stop signals netdelay and checks how it ended: on SIGTERM cleanly, with
// nothing said after its start line.
func (nd *netdelay) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := nd.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	select {
	case <-nd.exited:
	case <-time.After(5 * time.Second):
		t.Fatalf("netdelay still running 5s after %v", sig)
	}
	if sig != syscall.SIGTERM {
		return
	}
	if code := nd.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("netdelay exited %d on SIGTERM: %q", code, nd.lines())
	}
	if l := nd.lines(); len(l) != 1 {
		t.Errorf("netdelay said more than its start line: %q", l)
	}
}

// startEcho serves TCP echo in B.
func startEcho(t *testing.T) {
	var ln net.Listener
	err := inNetns(nsB, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(addrB, echoPort))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { defer c.Close(); _, _ = io.Copy(c, c) })
		}
	}()
}

// dial connects from A to B's echo server.
func dial(t *testing.T) net.Conn {
	var c net.Conn
	err := inNetns(nsA, func() (err error) {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(addrB, echoPort), 5*time.Second)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rtt is the median time of n small echo round trips on c.
func rtt(t *testing.T, c net.Conn, n int) time.Duration {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(time.Duration(n) * 2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var samples []time.Duration
	got := make([]byte, 16)
	for i := range n {
		msg := fmt.Appendf(nil, "netdelay-rtt-%03d", i)
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		samples = append(samples, time.Since(start))
		if !bytes.Equal(got, msg) {
			t.Fatalf("echo %q, sent %q", got, msg)
		}
	}
	slices.Sort(samples)
	return samples[n/2]
}

// bulk echoes size bytes through c at once, a TCP window's worth of
// packets through the queue, checks they come back whole and says how long
// it took. midway, if given, runs once a quarter has come back.
func bulk(t *testing.T, c net.Conn, size int, limit time.Duration, midway ...func()) time.Duration {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(limit)); err != nil {
		t.Fatal(err)
	}
	sent := make([]byte, size)
	for i := range sent {
		sent[i] = byte(i * 7 / 5)
	}
	start := time.Now()
	werr := make(chan error, 1)
	go func() { _, err := c.Write(sent); werr <- err }()
	got := make([]byte, size)
	for n := 0; n < size; {
		m, err := c.Read(got[n:])
		if err != nil {
			t.Fatal(err)
		}
		if n < size/4 && n+m >= size/4 {
			for _, f := range midway {
				f()
			}
		}
		n += m
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sent) {
		t.Fatal("bulk echo came back different")
	}
	took := time.Since(start)
	t.Logf("%d KiB echoed through the delay in %v (%.0f KiB/s)", size>>10, took.Round(time.Millisecond), float64(size>>10)/took.Seconds())
	return took
}

// setnsTrap is the setns(2) number: package syscall names it only on some
// architectures, and golang.org/x/sys is not a direct dependency.
var setnsTrap = map[string]uintptr{"amd64": 308, "arm64": 268, "386": 346}

// inNetns runs fn on a thread inside the named namespace. Sockets keep the
// namespace they were made in, so what fn makes can then be used from any
// goroutine.
func inNetns(name string, fn func() error) error {
	trap, ok := setnsTrap[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("setns: unknown on %s", runtime.GOARCH)
	}
	errc := make(chan error, 1)
	go func() {
		// Not unlocked unless the thread got back to its own namespace:
		// the runtime then ends the thread with the goroutine.
		runtime.LockOSThread()
		errc <- func() error {
			self, err := os.Open("/proc/thread-self/ns/net")
			if err != nil {
				return err
			}
			defer self.Close()
			target, err := os.Open("/run/netns/" + name)
			if err != nil {
				return err
			}
			defer target.Close()
			setns := func(f *os.File) error {
				if _, _, e := syscall.RawSyscall(trap, f.Fd(), syscall.CLONE_NEWNET, 0); e != 0 {
					return fmt.Errorf("setns: %w", e)
				}
				return nil
			}
			if err := setns(target); err != nil {
				return err
			}
			ferr := fn()
			if err := setns(self); err != nil {
				return errors.Join(ferr, err)
			}
			runtime.UnlockOSThread()
			return ferr
		}()
	}()
	return <-errc
}
