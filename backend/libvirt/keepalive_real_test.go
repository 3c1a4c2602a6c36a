//go:build reallibvirt

package libvirt

// libvirt's own keepalive against a real daemon that stops answering
// (SIGSTOP) while calls are in flight, with whichever client library the
// process loaded: Debian 12's 9.0 crashes here (CVE-2024-4418), 11.3
// (scripts/libvirt-client.sh) must not. docs/libvirt-client.md has the
// figures and the commands.
//
// The daemon frozen is one the caller started for the purpose, named by
// BIGFLEET_KA_URI and BIGFLEET_KA_PID_FILE, e.g. a session libvirtd of
// scripts/libvirt-second-host.sh run with its own user:
//
//	BIGFLEET_HOST2_USER=bfka BIGFLEET_HOST2_STATE=/run/bigfleet-ka-host \
//	  flock -o /tmp/bf-real-libvirt.lock scripts/libvirt-second-host.sh up
//	BIGFLEET_KA_URI=qemu+unix:///session?socket=/run/bfka/libvirt/libvirt-sock \
//	BIGFLEET_KA_PID_FILE=/run/bfka/libvirtd.pid \
//	LD_LIBRARY_PATH=$(scripts/libvirt-client.sh) \
//	  go test -tags reallibvirt -run 'KeepAlive.*Real' -count=1 -v ./backend/libvirt/
//
// A daemon run by root (the system libvirtd, the lab's) is never frozen.

import (
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

const (
	kaInterval = 2 // s
	kaCount    = 3
)

// kaDaemon is the daemon of the test: its URI and its pid, checked to be a
// libvirtd not run by root.
func kaDaemon(t *testing.T) (uri string, pid int) {
	t.Helper()
	uri, pidFile := os.Getenv("BIGFLEET_KA_URI"), os.Getenv("BIGFLEET_KA_PID_FILE")
	if uri == "" || pidFile == "" {
		t.Skip("BIGFLEET_KA_URI and BIGFLEET_KA_PID_FILE not set (a daemon of the test's own: see the file's comment)")
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if strings.TrimSpace(string(comm)) != "libvirtd" {
		t.Fatalf("pid %d (from %s) is not a libvirtd", pid, pidFile)
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+strconv.Itoa(pid), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid == 0 {
		t.Fatalf("pid %d is a libvirtd run by root: this test freezes only a daemon of its own", pid)
	}
	return uri, pid
}

// freezePid SIGSTOPs pid and returns its thaw; the cleanup thaws it
// whatever happens.
func freezePid(t *testing.T, pid int) (thaw func()) {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	thaw = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(thaw)
	return thaw
}

func clientVersionString(t *testing.T) string {
	v, err := libvirt.GetVersion()
	if err != nil {
		t.Fatal(err)
	}
	return virt.Version(v)
}

// TestKeepAliveUnderCallsReal is TestReconnectUnderCallsReal with libvirt's
// keepalive turned on explicitly, whatever the client version: the
// provider's own dial path (New, its event loop, close callback, watchdog
// and reconnect), then SetKeepAlive on the connection, 8 goroutines making
// the backend's calls, and the daemon frozen past the keepalive's verdict
// (2 s x 3). With a client that has the bug the process dies (SIGSEGV or
// SIGABRT inside libvirt's RPC client): the test binary exits on a signal.
func TestKeepAliveUnderCallsReal(t *testing.T) {
	uri, pid := kaDaemon(t)
	pool := os.Getenv("BIGFLEET_POOL")
	if pool == "" {
		pool = "bigfleet"
	}
	t.Logf("client libvirt %s", clientVersionString(t))
	cfg := Config{Hosts: []Host{{Zone: "z", URI: uri}}, Provider: "bf-keepalive", Image: "bigfleet-golden.qcow2",
		Pool: pool, DomainType: DomainTypeQEMU, KeepAliveSecs: kaInterval, KeepAliveCount: kaCount,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	h := b.loc.hosts["z"]
	for start := time.Now(); h.Ready() != nil && time.Since(start) < 10*time.Second; {
		time.Sleep(50 * time.Millisecond)
	}
	if err := h.Ready(); err != nil {
		t.Fatalf("not connected: %v", err)
	}
	if err := h.With(func(c virt.Conn) error { return c.SetKeepAlive(kaInterval, kaCount) }); err != nil {
		t.Fatalf("SetKeepAlive: %v", err)
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
				if err != nil {
					fails.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(time.Second)
	thaw := freezePid(t, pid)
	frozen := time.Now()
	time.Sleep(15 * time.Second) // past the keepalive's verdict (6-8 s) and the watchdog's
	thaw()
	back := time.Now()
	for h.Ready() != nil && time.Since(back) < 15*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("frozen %s; host back %s after the thaw", back.Sub(frozen).Round(100*time.Millisecond),
		time.Since(back).Round(100*time.Millisecond))
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()
	t.Logf("survived: calls=%d failed=%d (failures while frozen are expected)", calls.Load(), fails.Load())
	if err := h.Ready(); err != nil {
		t.Errorf("host not back after the thaw: %v", err)
	}
}

// TestKeepAliveBoundReal measures what libvirt's keepalive alone bounds: a
// bare connection (no provider watchdog, no call bound), keepalive 2 s x 3,
// 4 calls in flight on it when the daemon freezes; each must return, with
// an error, within interval x (count+1) plus slack of the freeze. Skipped
// on a client older than 10.4 (it crashes here; BIGFLEET_KA_FORCE=1 runs it
// anyway).
func TestKeepAliveBoundReal(t *testing.T) {
	uri, pid := kaDaemon(t)
	v, err := libvirt.GetVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v < 10_004_000 && os.Getenv("BIGFLEET_KA_FORCE") != "1" {
		t.Skipf("client libvirt %s has CVE-2024-4418 (BIGFLEET_KA_FORCE=1 to run it anyway)", virt.Version(v))
	}
	t.Logf("client libvirt %s", virt.Version(v))
	hostconn.StartEventLoop(slog.Default())
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetKeepAlive(kaInterval, kaCount); err != nil {
		t.Fatalf("SetKeepAlive: %v", err)
	}
	closed := make(chan time.Time, 1)
	if err := conn.RegisterCloseCallback(func(_ *libvirt.Connect, _ libvirt.ConnectCloseReason) {
		select {
		case closed <- time.Now():
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	var frozenAt atomic.Pointer[time.Time]
	type ret struct {
		d   time.Duration
		err error
	}
	rets := make(chan ret, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var err error
				if i%2 == 0 {
					_, err = conn.GetCapabilities()
				} else {
					var doms []libvirt.Domain
					doms, err = conn.ListAllDomains(0)
					for _, d := range doms {
						_ = d.Free()
					}
				}
				if f := frozenAt.Load(); f != nil {
					// A success just after the SIGSTOP is a reply the
					// daemon had sent already: call again, that call
					// waits on the frozen daemon.
					if d := time.Since(*f); err != nil || d > time.Second {
						rets <- ret{d, err}
						return
					}
					continue
				}
				if err != nil {
					rets <- ret{0, err}
					return
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	thaw := freezePid(t, pid)
	now := time.Now()
	frozenAt.Store(&now)
	limit := time.Duration(kaInterval*(kaCount+1))*time.Second + 3*time.Second
	hold := limit + 15*time.Second // how long the daemon stays frozen
	var during []time.Duration
	deadline := time.After(hold)
collect:
	for len(during) < 4 {
		select {
		case r := <-rets:
			t.Logf("in-flight call returned %s after the freeze (daemon frozen): %v", r.d.Round(10*time.Millisecond), r.err)
			during = append(during, r.d)
			if r.err == nil {
				t.Errorf("a call on the frozen daemon succeeded")
			}
		case <-deadline:
			break collect
		}
	}
	select {
	case at := <-closed:
		t.Logf("close callback %s after the freeze", at.Sub(now).Round(10*time.Millisecond))
	default:
		t.Logf("no close callback while frozen")
	}
	stuck := 4 - len(during)
	thaw()
	thawed := time.Now()
	for range stuck {
		select {
		case r := <-rets:
			t.Logf("in-flight call returned only after the thaw (%s after the freeze, %s after the thaw): %v",
				r.d.Round(10*time.Millisecond), time.Since(thawed).Round(10*time.Millisecond), r.err)
		case <-time.After(30 * time.Second):
			t.Fatalf("calls still blocked 30 s after the thaw")
		}
	}
	wg.Wait()
	if len(during) == 0 {
		t.Fatalf("keepalive %ds x %d: no in-flight call returned in the %s the daemon was frozen", kaInterval, kaCount, hold)
	}
	worst := slices.Max(during)
	t.Logf("bound: keepalive %ds x %d: %d of 4 in-flight calls returned while the daemon was frozen (%s), the slowest %s after the freeze; %d returned only after the thaw",
		kaInterval, kaCount, len(during), hold, worst.Round(10*time.Millisecond), stuck)
	if stuck > 0 {
		t.Logf("NOTE: libvirt's keepalive woke only the call that was running the connection's I/O loop; calls queued behind it stayed blocked until the daemon answered")
	}
	if worst > limit {
		t.Errorf("slowest call took %s, past %s", worst, limit)
	}
}
