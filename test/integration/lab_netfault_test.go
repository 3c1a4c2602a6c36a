//go:build integration && lab

package integration

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestLabFaultKinds checks the lab's own faults on lab1, as seen from this
// machine, so that a test built on them tests what it says: partition is
// silence (no RST), delay adds its round trip to established connections,
// loss drops packets, freeze leaves connections open with nobody
// answering, kill-daemon closes the port, and heal undoes each. Not
// parallel: it breaks lab1 for everyone while it runs.
func TestLabFaultKinds(t *testing.T) {
	e := loadLab(t)
	const host = "lab1"
	t.Cleanup(func() { e.lab(t, "heal", host) })
	addr := net.JoinHostPort(host, "16514") // libvirtd's TLS port

	base := rtt(t, addr, 5)
	t.Logf("TIMING %s round trip (TCP connect) %s", host, base)

	t.Run("partition", func(t *testing.T) {
		e.lab(t, "fault", host, "partition")
		start := time.Now()
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
			t.Fatalf("connected to %s through a partition", addr)
		}
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() || time.Since(start) < 1900*time.Millisecond {
			t.Fatalf("a partition must be silent (a timeout, no RST): %v after %s", err, time.Since(start))
		}
		e.lab(t, "heal", host)
		rtt(t, addr, 1)
	})

	t.Run("delay", func(t *testing.T) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		must(t, err)
		defer c.Close()
		e.lab(t, "fault", host, "delay", "300")
		d := rtt(t, addr, 3)
		if d < base+250*time.Millisecond || d > base+1500*time.Millisecond {
			t.Fatalf("round trip %s with delay 300 ms (base %s)", d, base)
		}
		t.Logf("TIMING round trip with delay 300: %s", d)
		// The connection opened before the fault is delayed too: a TLS
		// ClientHello's answer (the server's hello or an alert) takes the
		// delay. Any byte back will do.
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		t0 := time.Now()
		_, _ = c.Write(tlsClientHelloish)
		buf := make([]byte, 1)
		_, _ = c.Read(buf)
		if took := time.Since(t0); took < 250*time.Millisecond {
			t.Fatalf("an established connection answered in %s with delay 300 ms", took)
		}
		e.lab(t, "heal", host)
		if d := rtt(t, addr, 3); d > base+150*time.Millisecond {
			t.Fatalf("round trip %s after heal (base %s)", d, base)
		}
	})

	t.Run("loss", func(t *testing.T) {
		e.lab(t, "fault", host, "loss", "60")
		lost := 0
		for range 10 {
			c, err := net.DialTimeout("tcp", addr, 700*time.Millisecond)
			if err != nil {
				lost++
				continue
			}
			c.Close()
		}
		// A connect survives only if SYN and SYN-ACK both pass within the
		// timeout (no retransmission in 0.7 s): 0.4*0.4 = 16 %.
		if lost < 5 {
			t.Fatalf("%d of 10 connects failed with loss 60%%", lost)
		}
		e.lab(t, "heal", host)
		rtt(t, addr, 3)
	})

	t.Run("freeze", func(t *testing.T) {
		e.lab(t, "fault", host, "freeze")
		// The port still accepts (the kernel's backlog), libvirt says nothing.
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		must(t, err)
		defer c.Close()
		if out, err := exec.Command("timeout", "5", "virsh", "-c", labURI(t, e, host), "version").CombinedOutput(); err == nil {
			t.Fatalf("a frozen libvirtd answered: %s", out)
		}
		e.lab(t, "fault", host, "thaw")
		if out, err := exec.Command("timeout", "20", "virsh", "-c", labURI(t, e, host), "version").CombinedOutput(); err != nil {
			t.Fatalf("thawed libvirtd: %v %s", err, out)
		}
	})

	t.Run("kill-daemon", func(t *testing.T) {
		e.lab(t, "fault", host, "kill-daemon")
		if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
			c.Close()
			t.Fatal("libvirtd's port accepts after kill-daemon")
		} else if !strings.Contains(err.Error(), "refused") {
			t.Fatalf("want connection refused (the host is up, its daemon is not): %v", err)
		}
		e.lab(t, "fault", host, "start-daemon")
		rtt(t, addr, 1)
	})
}

// labURI is the host's URI in the lab's hosts file.
func labURI(t *testing.T, e labEnv, host string) string {
	t.Helper()
	for _, h := range e.labHosts(t, e.Hosts).Hosts {
		if h.Name == host {
			return h.URI
		}
	}
	t.Fatalf("no %s in %s", host, e.Hosts)
	return ""
}

// rtt is the median of n TCP connects to addr (the SYN round trip).
func rtt(t *testing.T, addr string, n int) time.Duration {
	t.Helper()
	var ds []time.Duration
	for range n {
		t0 := time.Now()
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("connect %s: %v", addr, err)
		}
		ds = append(ds, time.Since(t0))
		c.Close()
	}
	med, _ := stats(ds)
	return med
}

// tlsClientHelloish is enough of a TLS record to make a TLS server answer
// (with a hello or an alert): a handshake record with a truncated body.
var tlsClientHelloish = []byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00}
