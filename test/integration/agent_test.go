//go:build integration

package integration

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// secretBlob is a bootstrap blob carrying a distinctive random marker, plus
// the forms a leak could take (raw, base64 as sent to guest-file-write, hex).
type secretBlob struct {
	blob  []byte
	forms []string
}

func newSecretBlob(t *testing.T) secretBlob {
	t.Helper()
	r := make([]byte, 16)
	if _, err := rand.Read(r); err != nil {
		t.Fatal(err)
	}
	marker := "BFSECRET" + hex.EncodeToString(r)
	blob := []byte(marker)
	return secretBlob{blob: blob, forms: []string{marker, base64.StdEncoding.EncodeToString(blob),
		base64.RawURLEncoding.EncodeToString(blob), hex.EncodeToString(blob)}}
}

// assertNoLeak checks that none of the blobs shows in the provider's logs,
// its /metrics, any machine's last_error, or the state file.
func assertNoLeak(t *testing.T, p *provider, blobs ...secretBlob) {
	t.Helper()
	var l pb.MachineList
	must(t, p.call(t.Context(), "List", &pb.ListFilter{}, &l))
	var errs []string
	for _, m := range l.GetMachines() {
		errs = append(errs, m.GetLastError())
	}
	places := map[string]string{"logs": p.out.String(), "last_error": strings.Join(errs, "\n")}
	if p.metricsAddr != "" {
		places["/metrics"] = p.scrapeMetrics(t)
	}
	if p.cfg.State != "" {
		raw, err := os.ReadFile(p.cfg.State)
		must(t, err)
		places["state file"] = string(raw)
	}
	for where, text := range places {
		for _, b := range blobs {
			for _, f := range b.forms {
				if strings.Contains(text, f) {
					t.Errorf("the bootstrap blob (%q) appears in %s", f, where)
				}
			}
		}
		t.Logf("no blob in %s (%d bytes checked)", where, len(text))
	}
}

// assertUnbound checks through the domain's own metadata that a failed
// Configure left no cluster binding.
func assertUnbound(t *testing.T, e env, name, id string) {
	t.Helper()
	md := domainMetadata(t, e, meta.DomainName(name, id))
	if !md.Owned(name, id) || md.ClusterID != "" || len(md.ShardMetadata) != 0 {
		t.Fatalf("metadata after a failed Configure: %+v", md)
	}
}

func createIdle(t *testing.T, p *provider, ids ...string) {
	t.Helper()
	for _, id := range ids {
		p.accept(t, "Create", &pb.CreateRequest{MachineId: id})
	}
	for _, id := range ids {
		p.awaitOneOf(t, id, 3*time.Minute, stIdle)
	}
}

// TestConfigureHookFailures: a bootstrap hook killed by a signal and one that
// hangs (run side by side on two guests, --configure-timeout 25s) both end
// FAILED with last_error saying why (the signal; "timed out" at the
// timeout), leave no binding in the domain metadata, and the blob shows
// nowhere. FAILED machines are released at the end.
func TestConfigureHookFailures(t *testing.T) {
	e := loadEnv(t)
	const name = "it-hook"
	const timeout = 25 * time.Second
	sweepAtEnd(t, e, name)
	p := startProvider(t, e, provCfg{Name: name, State: filepath.Join(t.TempDir(), "state.db"), Slots: 2,
		Metrics: true, Args: []string{"--configure-timeout=" + timeout.String()}})
	ids := p.ids(t)
	sig, hang := ids[0], ids[1]
	createIdle(t, p, sig, hang)
	blobs := []secretBlob{newSecretBlob(t), newSecretBlob(t)}

	t0 := time.Now()
	p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: sig, ClusterId: "signal", BootstrapBlob: blobs[0].blob})
	p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: hang, ClusterId: "hang", BootstrapBlob: blobs[1].blob})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		m, _ := p.awaitOneOf(t, sig, timeout+30*time.Second, stFailed, stConfigured)
		t.Logf("TIMING signal: Configure accepted → %s in %s: %q", m.GetState(), time.Since(t0).Round(time.Millisecond), m.GetLastError())
		if m.GetState() != stFailed || !strings.Contains(m.GetLastError(), "signal 9") {
			t.Errorf("hook killed by SIGKILL: %s %q, want FAILED naming signal 9", m.GetState(), m.GetLastError())
		}
	}()
	go func() {
		defer wg.Done()
		m, seen := p.awaitOneOf(t, hang, timeout+30*time.Second, stFailed, stConfigured)
		took := time.Since(t0)
		t.Logf("TIMING hang: Configure accepted → %s in %s (seen %v): %q", m.GetState(), took.Round(time.Millisecond), seen, m.GetLastError())
		if m.GetState() != stFailed || !strings.Contains(m.GetLastError(), "timed out") {
			t.Errorf("hanging hook: %s %q, want FAILED saying it timed out", m.GetState(), m.GetLastError())
		}
		if took < timeout-time.Second || took > timeout+10*time.Second {
			t.Errorf("hanging hook failed after %s, want ≈ the %s configure timeout", took, timeout)
		}
	}()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	assertUnbound(t, e, name, sig)
	assertUnbound(t, e, name, hang)
	assertNoLeak(t, p, blobs...)
	for _, id := range ids {
		p.settle(t, id)
	}
	assertNothingLeft(t, e, name)
}

// TestConfigureWithoutAgent: a guest with no qemu-guest-agent
// (bigfleet.noagent=1) → Configure FAILED within --configure-timeout with a
// last_error about the agent; no binding; no blob anywhere.
func TestConfigureWithoutAgent(t *testing.T) {
	e := loadEnv(t)
	const name = "it-noagent"
	const timeout = 25 * time.Second
	const agentWait = 10 * time.Second
	sweepAtEnd(t, e, name)
	p := startProvider(t, e, provCfg{Name: name, State: filepath.Join(t.TempDir(), "state.db"), Slots: 1,
		Metrics: true, Cmdline: "console=ttyS0 panic=-1 quiet bigfleet.noagent=1",
		// --wait-booted=false: IDLE without an agent, so the Configure meets it
		// (with the default a Create fails instead: TestBootedNoAgentFailsCreate).
		Args: []string{"--configure-timeout=" + timeout.String(), "--agent-wait=" + agentWait.String(), "--wait-booted=false"}})
	id := p.ids(t)[0]
	createIdle(t, p, id)
	blob := newSecretBlob(t)
	t0 := time.Now()
	p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-noagent", BootstrapBlob: blob.blob})
	m, _ := p.awaitOneOf(t, id, timeout+15*time.Second, stFailed, stConfigured)
	took := time.Since(t0)
	t.Logf("TIMING no agent: Configure accepted → %s in %s: %q", m.GetState(), took.Round(time.Millisecond), m.GetLastError())
	if m.GetState() != stFailed || !strings.Contains(m.GetLastError(), "agent") {
		t.Fatalf("no agent: %s %q, want FAILED with a message about the guest agent", m.GetState(), m.GetLastError())
	}
	if took >= timeout || !strings.Contains(m.GetLastError(), "did not answer within "+agentWait.String()) {
		t.Fatalf("no agent: FAILED after %s (%q), want at the %s --agent-wait, within the %s configure timeout",
			took, m.GetLastError(), agentWait, timeout)
	}
	assertUnbound(t, e, name, id)
	assertNoLeak(t, p, blob)
	p.settle(t, id)
	assertNothingLeft(t, e, name)
}

// TestReadinessAndDrainEscalation on one guest:
//   - a readiness hook that succeeds only on its 3rd call (cluster ready3)
//     keeps the machine CONFIGURING until then (the guest's counter reads 3);
//   - Drain with grace 0 goes straight to the forced mode and is quick;
//   - Drain of a hook that hangs (cluster drainhang, grace 3 s) escalates to
//     the forced mode within grace + the drain margin, never stuck DRAINING;
//   - the blobs show nowhere.
func TestReadinessAndDrainEscalation(t *testing.T) {
	e := loadEnv(t)
	const name = "it-ready"
	sweepAtEnd(t, e, name)
	p := startProvider(t, e, provCfg{Name: name, State: filepath.Join(t.TempDir(), "state.db"), Slots: 1,
		Metrics: true, Args: []string{"--configure-timeout=3m", "--drain-timeout=2m", "--drain-margin=8s"}})
	id := p.ids(t)[0]
	createIdle(t, p, id)
	domain := meta.DomainName(name, id)
	pl := backend.Placement{Zone: "local", Domain: domain}
	diag := newBackend(t, e, name) // for guest-exec diagnostics only
	blobs := []secretBlob{newSecretBlob(t), newSecretBlob(t)}

	// Readiness on the 3rd poll.
	t0 := time.Now()
	p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "ready3", BootstrapBlob: blobs[0].blob,
		ShardMetadata: map[string]string{"s": "1"}})
	m, seen := p.awaitOneOf(t, id, 3*time.Minute, stConfigured, stFailed)
	t.Logf("TIMING ready3: Configure accepted → %s in %s (seen %v)", m.GetState(), time.Since(t0).Round(time.Millisecond), seen)
	if m.GetState() != stConfigured || seen[0] != stConfiguring {
		t.Fatalf("ready3: %s %q, seen %v: want CONFIGURING then CONFIGURED", m.GetState(), m.GetLastError(), seen)
	}
	if n := guestCat(t, diag, pl, "/run/bigfleet/ready.count"); n != "3" {
		t.Fatalf("ready hook ran %s times before CONFIGURED, want 3", n)
	}
	if got := guestCat(t, diag, pl, "/run/bigfleet/blob.sha256"); got != sha(blobs[0].blob) {
		t.Fatalf("blob in guest %s, want %s", got, sha(blobs[0].blob))
	}
	if md := domainMetadata(t, e, domain); md.ClusterID != "ready3" {
		t.Fatalf("binding after CONFIGURED: %+v", md)
	}

	// Grace 0: forced mode at once.
	t0 = time.Now()
	p.accept(t, "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: 0})
	m, seen = p.awaitOneOf(t, id, time.Minute, stIdle, stFailed)
	took := time.Since(t0)
	t.Logf("TIMING drain grace 0: accepted → %s in %s (seen %v)", m.GetState(), took.Round(time.Millisecond), seen)
	if m.GetState() != stIdle || m.GetCluster() != "" {
		t.Fatalf("drain grace 0: %+v", m)
	}
	if took > 10*time.Second {
		t.Fatalf("drain grace 0 took %s", took)
	}
	if got := guestCat(t, diag, pl, "/run/bigfleet/drained"); got != "drained" {
		t.Fatalf("drain hook did not run: %q", got)
	}
	if !logLine(p, "graceful drain gave up; forcing", "cluster=ready3") {
		t.Fatal("drain with grace 0 did not log the forced mode")
	}

	// A drain hook that hangs: escalation within grace + margin.
	p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "drainhang", BootstrapBlob: blobs[1].blob})
	p.awaitOneOf(t, id, 2*time.Minute, stConfigured)
	const grace = 3 * time.Second
	const margin = 8 * time.Second // --drain-margin above
	t0 = time.Now()
	p.accept(t, "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: int64(grace / time.Second)})
	m, seen = p.awaitOneOf(t, id, grace+margin+20*time.Second, stIdle, stFailed)
	took = time.Since(t0)
	t.Logf("TIMING drainhang grace %s: accepted → %s in %s (seen %v) %q", grace, m.GetState(), took.Round(time.Millisecond), seen, m.GetLastError())
	if m.GetState() != stIdle || seen[0] != stDraining {
		t.Fatalf("hanging drain hook: %s %q (seen %v), want DRAINING then IDLE", m.GetState(), m.GetLastError(), seen)
	}
	if took < grace+margin || took > grace+margin+10*time.Second {
		t.Fatalf("hanging drain hook: IDLE after %s, want within grace %s + margin %s", took, grace, margin)
	}
	if !logLine(p, "graceful drain gave up; forcing", "cluster=drainhang") {
		t.Fatal("the escalation of the hanging drain was not logged")
	}
	if md := domainMetadata(t, e, domain); md.ClusterID != "" {
		t.Fatalf("binding after drain: %+v", md)
	}

	assertNoLeak(t, p, blobs...)
	p.settle(t, id)
	assertNothingLeft(t, e, name)
}

// logLine reports whether one line of the provider's output has all parts.
func logLine(p *provider, parts ...string) bool {
	for _, l := range strings.Split(p.out.String(), "\n") {
		ok := true
		for _, s := range parts {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			return true
		}
	}
	return false
}
