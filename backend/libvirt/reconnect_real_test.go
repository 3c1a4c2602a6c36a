//go:build reallibvirt

package libvirt

// Run against the real libvirtd of scripts/libvirt-env.sh (make
// test-reconnect): it freezes the daemon, so it needs root and the lock.

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// libvirtdPID is the pid of the libvirtd scripts/libvirt-env.sh runs (its
// pid file): never the oldest libvirtd found, which may be a lab host's.
func libvirtdPID(t *testing.T) int {
	t.Helper()
	out, err := os.ReadFile("/run/libvirtd.pid")
	if err != nil {
		t.Fatal("no /run/libvirtd.pid: start libvirtd with scripts/libvirt-env.sh up")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) != "libvirtd" {
		t.Fatalf("pid %d of /run/libvirtd.pid is not libvirtd", pid)
	}
	return pid
}

// freezeLibvirtd SIGSTOPs the daemon and returns its thaw; the cleanup
// thaws it whatever happens.
func freezeLibvirtd(t *testing.T) (thaw func()) {
	pid := libvirtdPID(t)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	thaw = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(thaw)
	return thaw
}

// The crash of issue 15 case 1: libvirtd frozen past the link's verdict
// while calls are in flight. With libvirt's keepalive on, the process died
// with SIGSEGV inside libvirt's RPC client within a second of the verdict,
// every time. Now: the zone is reported down during the freeze, calls in
// flight wait for the daemon and complete, and the host is back after.
func TestReconnectUnderCallsReal(t *testing.T) {
	uri := os.Getenv("BIGFLEET_LIBVIRT_URI")
	if uri == "" {
		t.Skip("BIGFLEET_LIBVIRT_URI not set: run through make test-reconnect")
	}
	cfg := Config{Hosts: []Host{{Zone: "z", URI: uri}}, Provider: "bf-reconnect", Image: os.Getenv("BIGFLEET_IMAGE"),
		Pool: os.Getenv("BIGFLEET_POOL"), DomainType: DomainTypeQEMU, KeepAliveSecs: 2, KeepAliveCount: 3,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	awaitStarted(t, b)
	h := b.loc.hosts["z"]
	if err := h.Ready(); err != nil {
		t.Fatalf("not connected: %v", err)
	}
	var stop atomic.Bool
	var calls, fails atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				err := realCall(h, i%4)
				calls.Add(1)
				if err != nil && !errors.Is(err, backend.ErrHostUnavailable) {
					fails.Add(1)
					t.Logf("call %d: %v", i%4, err)
				}
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(time.Second)
	thaw := freezeLibvirtd(t)
	start := time.Now()
	for h.Ready() == nil && time.Since(start) < 20*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	down := h.Ready()
	t.Logf("zone down after %s: %v", time.Since(start).Round(100*time.Millisecond), down)
	time.Sleep(max(0, 18*time.Second-time.Since(start))) // past libvirt's own 5 s x 3 verdict
	thaw()
	back := time.Now()
	for h.Ready() != nil && time.Since(back) < 10*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("zone back %s after the thaw", time.Since(back).Round(100*time.Millisecond))
	time.Sleep(2 * time.Second)
	stop.Store(true)
	wg.Wait()
	t.Logf("calls=%d failed=%d", calls.Load(), fails.Load())
	if down == nil || !strings.Contains(down.Error(), "did not answer") {
		t.Errorf("during the freeze the zone was not reported down by the watchdog: %v", down)
	}
	if err := h.Ready(); err != nil {
		t.Errorf("host not back after the thaw: %v", err)
	}
	if fails.Load() > 0 {
		t.Errorf("%d calls failed with something other than host-unavailable", fails.Load())
	}
}

// realCall is one of the calls the backend makes, by kind.
func realCall(h *host, kind int) error {
	switch kind {
	case 0:
		err := h.WithDomain("bf-reconnect-none", func(virt.Conn, virt.Domain) error { return nil })
		if isCode(err, libvirt.ERR_NO_DOMAIN) {
			return nil
		}
		return err
	case 1:
		return h.With(func(c virt.Conn) error {
			doms, err := c.ListAllDomains(0)
			for _, d := range doms {
				_, _, _ = d.GetState()
				_ = d.Free()
			}
			return err
		})
	case 2:
		return h.With(func(c virt.Conn) error { _, err := c.GetCapabilities(); return err })
	default:
		return h.With(func(c virt.Conn) error {
			p, err := c.LookupStoragePoolByName(os.Getenv("BIGFLEET_POOL")) // the Pool of its Config
			if err != nil {
				return err
			}
			defer p.Free()
			_, err = p.GetInfo()
			return err
		})
	}
}
