//go:build integration

package integration

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// Issue 41: a Configure cut by a SIGKILL and then forgotten with the state
// file (a failover rebuilds from the hosts the same way) ends as its
// guest tells: the domain's metadata carries the Configure's intent,
// written before the hook may start, and the rebuilt provider takes the
// machine as that Configure cut short instead of adopting it IDLE.

// killAndLoseState SIGKILLs p, checks the domain still carries the
// intent of op, deletes the state file and starts a new provider.
func killAndLoseState(t *testing.T, e env, p *provider, cfg provCfg, domain, op string) *provider {
	t.Helper()
	p.kill(t)
	md := domainMetadata(t, e, domain)
	if md.Configure.OperationID != op || md.ClusterID != "" {
		t.Fatalf("domain metadata after the kill: intent %+v binding %q; want the intent of %s, no binding", md.Configure, md.ClusterID, op)
	}
	must(t, os.Remove(cfg.State))
	return startProvider(t, e, cfg)
}

// TestCutConfigureLostStateHookFinishedConfigured: SIGKILL after the
// bootstrap hook finished ok while the ready hook says not ready, then the
// state file deleted: the new provider finds the intent on the domain,
// asks the guest ("<op> exit 0"), waits for the ready hook and records the
// binding: CONFIGURED under the cut operation's id, intent gone. Before
// the intent the machine came back IDLE, its node in the cluster.
func TestCutConfigureLostStateHookFinishedConfigured(t *testing.T) {
	e := loadEnv(t)
	const name = "it-lostcfgok"
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

	ack := p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "ready3", BootstrapBlob: []byte("lost-state-blob")})
	op := ack.GetOperationId()
	awaitTrace(t, diag, pl, op+" exit 0")
	if s, _ := domainMetadata(t, e, domain).Marshal(false); strings.Contains(s, "lost-state-blob") {
		t.Fatal("the blob is in the domain's metadata")
	}
	guestRun(t, diag, pl, "/bin/sh", "-c", `echo 2 >/run/bigfleet/ready.count`)
	t0 := time.Now()
	p = killAndLoseState(t, e, p, cfg, domain, op)
	m, seen := p.awaitOneOf(t, id, 2*time.Minute, stConfigured, stIdle, stFailed)
	t.Logf("TIMING state file lost mid-Configure (hook finished) → %s in %s (seen %v)", m.GetState(), time.Since(t0).Round(time.Millisecond), seen)
	if m.GetState() != stConfigured || m.GetCluster() != "ready3" || m.GetLastError() != "" {
		t.Fatalf("rebuilt as %s cluster %q last_error %q; want CONFIGURED for ready3", m.GetState(), m.GetCluster(), m.GetLastError())
	}
	if md := domainMetadata(t, e, domain); md.ClusterID != "ready3" || md.OperationID != op || md.Configure.Begun() {
		t.Errorf("domain: binding %q op %q intent %+v; want ready3, %s, no intent", md.ClusterID, md.OperationID, md.Configure, op)
	}
	p.accept(t, "Drain", &pb.DrainRequest{MachineId: id})
	p.awaitOneOf(t, id, 2*time.Minute, stIdle)
	p.settle(t, id)
	assertNothingLeft(t, e, name)
}

// TestCutConfigureLostStateNeverStartedRollsBack: SIGKILL while a 4 MiB
// blob is being written (the hook has not started), then the state file
// deleted: the new provider finds the intent, the guest shows no trace of
// the operation, the partial blob is removed and the machine rolls back
// to IDLE saying why; the intent is cleared from the domain.
func TestCutConfigureLostStateNeverStartedRollsBack(t *testing.T) {
	e := loadEnv(t)
	const name = "it-lostcfgno"
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
	blob := make([]byte, 4<<20)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}

	ack := p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-lost", BootstrapBlob: blob})
	for start := time.Now(); ; {
		if fs := blobFiles(guestFiles(t, diag, pl)); len(fs) > 0 && fs[0].Size > 0 && fs[0].Size < len(blob) {
			break
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatal("never saw the blob half-written")
		}
	}
	t0 := time.Now()
	p = killAndLoseState(t, e, p, cfg, domain, ack.GetOperationId())
	m, seen := p.awaitOneOf(t, id, 2*time.Minute, stIdle, stConfigured, stFailed)
	t.Logf("TIMING state file lost mid-Configure (hook never started) → %s in %s (seen %v): %q", m.GetState(),
		time.Since(t0).Round(time.Millisecond), seen, m.GetLastError())
	if m.GetState() != stIdle || !strings.Contains(m.GetLastError(), "rolled back to IDLE") || m.GetCluster() != "" {
		t.Fatalf("rebuilt as %s cluster %q last_error %q; want IDLE, rolled back", m.GetState(), m.GetCluster(), m.GetLastError())
	}
	if md := domainMetadata(t, e, domain); md.Configure.Begun() || md.ClusterID != "" {
		t.Errorf("domain after the rollback: intent %+v binding %q; want neither", md.Configure, md.ClusterID)
	}
	if left := blobFiles(guestFiles(t, diag, pl)); len(left) != 0 {
		t.Errorf("the rolled-back Configure left %+v in the guest", left)
	}
	p.settle(t, id)
	assertNothingLeft(t, e, name)
}
