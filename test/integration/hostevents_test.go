//go:build integration

package integration

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// TestVanishedDomain: a domain destroyed, then undefined, behind the
// provider's back shows in Inventory as stopped, then as gone; Delete still
// cleans its overlay.
func TestVanishedDomain(t *testing.T) {
	e := loadEnv(t)
	b := newBackend(t, e, "it-vanish")
	id := uniq("van")
	ctx := t.Context()
	pl, err := b.Create(ctx, machine(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Delete(context.Background(), backend.DeleteSpec{MachineID: id, Zone: "local", Placement: pl})
	})
	if o := observed(t, b, id); !o.Running || o.Placement != pl {
		t.Fatalf("fresh machine %+v", o)
	}
	virsh(t, e, "destroy", pl.Domain)
	if o := observed(t, b, id); o.Running {
		t.Fatalf("destroyed machine still running: %+v", o)
	}
	virsh(t, e, "undefine", pl.Domain)
	if _, found := find(b, id); found {
		t.Fatal("undefined machine still listed")
	}
	if err := b.Delete(ctx, backend.DeleteSpec{MachineID: id, Zone: "local", Placement: pl}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(virsh(t, e, "vol-list", e.Pool), pl.Domain) {
		t.Fatal("overlay of a vanished domain left after Delete")
	}
}

// TestReconnectAfterLibvirtdRestart restarts libvirtd under a live backend:
// the backend notices, reports the zone unavailable, and reconnects by
// itself; the running guest is still listed afterwards.
func TestReconnectAfterLibvirtdRestart(t *testing.T) {
	e := loadEnv(t)
	if e.URI != "qemu:///system" {
		t.Skipf("restart test needs the local libvirtd (%s)", e.URI)
	}
	pid := libvirtdPID(t)
	t.Cleanup(func() { ensureLibvirtd(t, e) })
	b := newBackend(t, e, "it-restart")
	id := uniq("rst")
	pl, err := b.Create(t.Context(), machine(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Delete(context.Background(), backend.DeleteSpec{MachineID: id, Zone: "local", Placement: pl})
	})

	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "libvirtd to exit", func() bool { return syscall.Kill(pid, 0) != nil })
	waitUntil(t, 20*time.Second, "the backend to notice the loss", func() bool { return b.ZoneReady("local") != nil })
	noticed := time.Since(t0)
	startLibvirtd(t)
	t1 := time.Now()
	// Where libvirt re-probes QEMU on every call (root-only /dev/kvm), a
	// fresh libvirtd takes up to ~90 s to answer its first calls.
	waitUntil(t, 3*time.Minute, "the backend to reconnect", func() bool { return b.ZoneReady("local") == nil })
	t.Logf("TIMING loss noticed %s after SIGTERM; reconnected %s after libvirtd was started again", noticed, time.Since(t1))
	if o := observed(t, b, id); !o.Running {
		t.Fatalf("guest after restart: %+v", o)
	}
	hs := b.Hosts(t.Context())
	if !hs[0].Connected || hs[0].LibvirtVersion == "" {
		t.Fatalf("host after reconnect: %+v", hs[0])
	}
}

const (
	libvirtdPidFile = "/run/libvirtd.pid"
	envStateDir     = "/run/bigfleet-libvirt-env" // scripts/libvirt-env.sh's state
)

func libvirtdPID(t *testing.T) int {
	t.Helper()
	raw, err := os.ReadFile(libvirtdPidFile)
	if err != nil {
		t.Skipf("no %s: libvirtd not run as a plain daemon here", libvirtdPidFile)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); strings.TrimSpace(string(comm)) != "libvirtd" {
		t.Skipf("pid %d in %s is not libvirtd", pid, libvirtdPidFile)
	}
	return pid
}

// startLibvirtd starts libvirtd the way scripts/libvirt-env.sh does, and
// hands the new pid to that script's record so `down` still stops it.
func startLibvirtd(t *testing.T) {
	t.Helper()
	// TestMain marked inherited descriptors close-on-exec, so the daemon
	// does not keep the caller's lock (flock /tmp/bf-real-libvirt.lock).
	cmd := exec.Command("libvirtd", "-d", "-p", libvirtdPidFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start libvirtd: %v: %s", err, out)
	}
	waitUntil(t, 10*time.Second, "libvirtd's pid file", func() bool {
		_, err := os.Stat(libvirtdPidFile)
		return err == nil
	})
	started := envStateDir + "/libvirtd.started"
	if _, err := os.Stat(started); err == nil {
		if raw, err := os.ReadFile(libvirtdPidFile); err == nil {
			_ = os.WriteFile(started, raw, 0o644)
		}
	}
}

// ensureLibvirtd leaves the daemon running for whoever comes next.
func ensureLibvirtd(t *testing.T, e env) {
	if exec.Command("virsh", "-c", e.URI, "version").Run() == nil {
		return
	}
	if raw, err := os.ReadFile(libvirtdPidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && syscall.Kill(pid, 0) == nil {
			return // starting up
		}
	}
	startLibvirtd(t)
}

func waitUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
