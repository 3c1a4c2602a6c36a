//go:build integration

package integration

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// Issue 41: a Configure cut by a SIGKILL of bin/libvirt is decided, after
// the restart, from the bootstrap trace the real guest keeps (keyed by the
// operation id): a hook that finished ok finishes the Configure; one still
// running is waited for until --configure-timeout, then FAILED and killed.
// (A hook that never started rolls back to IDLE: TestGuestCleanKillMidBlob.)

// readTrace returns the guest's bootstrap trace ("" when there is none).
func readTrace(t *testing.T, b *libvirt.Backend, pl backend.Placement) string {
	t.Helper()
	return strings.TrimSpace(guestRun(t, b, pl, "/bin/sh", "-c", `cat "$1" 2>/dev/null; true`, "trace", traceFile))
}

// awaitTrace polls the guest's trace until it is want.
func awaitTrace(t *testing.T, b *libvirt.Backend, pl backend.Placement, want string) {
	t.Helper()
	for start := time.Now(); ; {
		got := readTrace(t, b, pl)
		if got == want {
			return
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("bootstrap trace %q, never %q", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCutConfigureAfterHookFinishedEndsConfigured: bin/libvirt is SIGKILLed
// after the bootstrap hook finished ok, while the ready hook still says
// not ready (cluster ready3 with its counter set far back); the restarted
// provider finds "<op> exit 0", waits for the ready hook and records the
// binding on the domain: CONFIGURED, no blob delivered again.
func TestCutConfigureAfterHookFinishedEndsConfigured(t *testing.T) {
	e := loadEnv(t)
	const name = "it-cutcfgok"
	sweepAtEnd(t, e, name)
	cfg := provCfg{Name: name, State: filepath.Join(t.TempDir(), "state.db"), Slots: 1,
		Args: []string{"--configure-timeout=3m"}}
	p := startProvider(t, e, cfg)
	id := p.ids(t)[0]
	createIdle(t, p, id)
	domain := meta.DomainName(name, id)
	pl := backend.Placement{Zone: "local", Domain: domain}
	diag := newBackend(t, e, name)
	waitAgent(t, diag, pl)
	guestRun(t, diag, pl, "/bin/sh", "-c", `mkdir -p /run/bigfleet && echo -1000000 >/run/bigfleet/ready.count`)
	blob := newSecretBlob(t)

	ack := p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "ready3", BootstrapBlob: blob.blob})
	op := ack.GetOperationId()
	awaitTrace(t, diag, pl, op+" exit 0")
	p.kill(t)
	if m := domainMetadata(t, e, domain); m.ClusterID != "" {
		t.Fatalf("binding %q recorded before the kill: the kill came too late", m.ClusterID)
	}
	t.Logf("killed bin/libvirt after the bootstrap hook of %s finished, while the ready hook said not ready", op)
	guestRun(t, diag, pl, "/bin/sh", "-c", `echo 2 >/run/bigfleet/ready.count`)

	t0 := time.Now()
	p = startProvider(t, e, cfg)
	m, seen := p.awaitOneOf(t, id, 2*time.Minute, stConfigured)
	t.Logf("after the restart: %s in %s (seen %v)", m.GetState(), time.Since(t0).Round(time.Millisecond), seen)
	if m.GetCluster() != "ready3" || m.GetLastError() != "" {
		t.Errorf("configured: cluster %q last_error %q", m.GetCluster(), m.GetLastError())
	}
	if md := domainMetadata(t, e, domain); md.ClusterID != "ready3" || md.OperationID != op {
		t.Errorf("domain binding %q op %q, want ready3 and %s", md.ClusterID, md.OperationID, op)
	}
	if !strings.Contains(p.out.String(), "finished a Configure cut by a restart") {
		t.Errorf("no log line of the finished Configure")
	}
	if got := guestCat(t, diag, pl, "/run/bigfleet/blob.sha256"); got != sha(blob.blob) {
		t.Errorf("the hook read a blob with sha256 %s, want %s", got, sha(blob.blob))
	}
	assertNoLeak(t, p, blob)

	p.accept(t, "Drain", &pb.DrainRequest{MachineId: id})
	p.awaitOneOf(t, id, 2*time.Minute, stIdle)
	p.settle(t, id)
	assertNothingLeft(t, e, name)
}

// TestCutConfigureHookStillRunningFailsAtTheBound: bin/libvirt is
// SIGKILLed while the bootstrap hook hangs (cluster hang). The restarted
// provider finds it running and waits for it, never FAILED on that alone;
// at --configure-timeout the machine is FAILED saying what was not
// learned, and the hook is killed in the guest.
func TestCutConfigureHookStillRunningFailsAtTheBound(t *testing.T) {
	e := loadEnv(t)
	const name = "it-cutcfghang"
	sweepAtEnd(t, e, name)
	const bound = 20 * time.Second
	cfg := provCfg{Name: name, State: filepath.Join(t.TempDir(), "state.db"), Slots: 1,
		Args: []string{"--configure-timeout=" + bound.String()}}
	p := startProvider(t, e, cfg)
	id := p.ids(t)[0]
	createIdle(t, p, id)
	domain := meta.DomainName(name, id)
	pl := backend.Placement{Zone: "local", Domain: domain}
	diag := newBackend(t, e, name)
	waitAgent(t, diag, pl)

	ack := p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "hang", BootstrapBlob: []byte("blob")})
	op := ack.GetOperationId()
	for start := time.Now(); !strings.HasPrefix(readTrace(t, diag, pl), op+" started "); {
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("the bootstrap hook never started: trace %q", readTrace(t, diag, pl))
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.kill(t)
	t0 := time.Now()
	p = startProvider(t, e, cfg)
	time.Sleep(bound / 2)
	if m := p.get(t, id); m.GetState() != pb.MachineState_MACHINE_STATE_CONFIGURING {
		t.Fatalf("half-way to the bound: %s %q, want still CONFIGURING (the hook runs)", m.GetState(), m.GetLastError())
	}
	m, _ := p.awaitOneOf(t, id, bound+time.Minute, stFailed, stIdle, stConfigured)
	took := time.Since(t0)
	t.Logf("after the restart: %s in %s: %q", m.GetState(), took.Round(time.Millisecond), m.GetLastError())
	if m.GetState() != stFailed || !strings.Contains(m.GetLastError(), "could not tell within --configure-timeout") ||
		!strings.Contains(m.GetLastError(), "still runs") {
		t.Errorf("want FAILED naming --configure-timeout and the running hook, got %s %q", m.GetState(), m.GetLastError())
	}
	if took < bound {
		t.Errorf("FAILED after %s, before the %s bound", took, bound)
	}
	if left := guestProcs(t, diag, pl, "sleep 3600"); len(left) != 0 {
		t.Errorf("the hook outlived the FAILED Configure: %q", left)
	}
	p.settle(t, id)
	assertNothingLeft(t, e, name)
}
