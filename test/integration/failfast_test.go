//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// accel is the env TestMain read: what every failure message names, since a
// guest that never answers is most often an accelerator that cannot boot.
var accel env

// qemuLogDir is where libvirt keeps each domain's QEMU log.
const qemuLogDir = "/var/log/libvirt/qemu"

// qemuLogTail is the last lines of a domain's QEMU log, formatted to end a
// failure message ("" when there is no domain or no log).
func qemuLogTail(domain string) string {
	if domain == "" || strings.ContainsAny(domain, "/\x00") {
		return ""
	}
	path := filepath.Join(qemuLogDir, domain+".log")
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("\n(no QEMU log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	lines = lines[max(0, len(lines)-20):]
	return fmt.Sprintf("\n--- last %d lines of %s (accelerator %s) ---\n%s", len(lines), path, accel.Accel,
		strings.Join(lines, "\n"))
}

// domainOf names a machine's domain: from its host ref once it has one,
// else by the provider's naming rule.
func (p *provider) domainOf(m *pb.Machine) string {
	if ref := m.GetHost().GetRef(); ref != "" {
		return ref[strings.LastIndex(ref, "/")+1:]
	}
	return meta.DomainName(p.cfg.Name, m.GetId())
}

// closeInheritedFDs marks every descriptor above 2 close-on-exec: the suite
// runs under `flock /tmp/bf-real-libvirt.lock`, and a libvirtd it restarts
// must not inherit (and so hold for good) that lock.
func closeInheritedFDs() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, so a test can check what a wait helper reports.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestWaitStopsAtFailed: a Create whose QEMU dies at start (a kernel file
// QEMU cannot load) ends FAILED, and the wait helper gives up at once
// rather than at its deadline, reporting last_error and the tail of the
// domain's QEMU log, where QEMU's own reason is.
func TestWaitStopsAtFailed(t *testing.T) {
	e := loadEnv(t)
	const name = "it-failfast"
	sweepAtEnd(t, e, name)
	dir, err := os.MkdirTemp("", "bf-it-badkernel-")
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755)) // QEMU runs as libvirt-qemu
	kernel := filepath.Join(dir, "vmlinuz")
	must(t, os.WriteFile(kernel, []byte(strings.Repeat("not a kernel\n", 512)), 0o644))
	p := startProvider(t, e, provCfg{Name: name, Slots: 1,
		Args: []string{"--kernel=" + kernel, "--create-timeout=2m"}})
	id := p.ids(t)[0]
	p.accept(t, "Create", &pb.CreateRequest{MachineId: id})

	const within = 5 * time.Minute
	rec := &fatalRecorder{TB: t}
	t0 := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.awaitOneOf(rec, id, within, stIdle)
	}()
	<-done
	took := time.Since(t0)
	t.Logf("TIMING Create with an unloadable kernel: wait ended after %s: %s", took.Round(time.Millisecond), rec.msg)
	m := p.get(t, id)
	if m.GetState() != stFailed || m.GetLastError() == "" {
		t.Fatalf("machine %s %q, want FAILED with a last_error", m.GetState(), m.GetLastError())
	}
	if took > within/2 {
		t.Fatalf("the wait ran %s of its %s: it did not stop at FAILED", took, within)
	}
	for _, want := range []string{"went FAILED", m.GetLastError(), "lines of " + qemuLogDir + "/" + p.domainOf(m) + ".log",
		"shutting down, reason=failed"} { // libvirt's last line of a QEMU that died
		if !strings.Contains(rec.msg, want) {
			t.Errorf("the wait's report lacks %q:\n%s", want, rec.msg)
		}
	}
	p.settle(t, id)
	assertNothingLeft(t, e, name)
}

// awaitHostConnected waits until bin/libvirt reports the host of zone
// connected (admin ListHosts): the API answers before that, and where
// libvirt re-probes QEMU on every call (a root-only /dev/kvm) connecting
// takes seconds, during which a Create is refused Unavailable.
func (p *binProc) awaitHostConnected(t *testing.T, zone string) {
	t.Helper()
	t0 := time.Now()
	var last string
	waitUntil(t, 90*time.Second, "host "+zone+" to connect", func() bool {
		var res adminv1.ListHostsResponse
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := p.conn.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/ListHosts", &adminv1.ListHostsRequest{}, &res); err != nil {
			last = err.Error()
			return false
		}
		for _, h := range res.GetHosts() {
			if h.GetZone() == zone {
				last = h.GetLastError()
				return h.GetConnected()
			}
		}
		last = "not listed"
		return false
	})
	if d := time.Since(t0); d > time.Second {
		t.Logf("host %s connected %s after the API answered (last: %s)", zone, d.Round(time.Millisecond), last)
	}
}
