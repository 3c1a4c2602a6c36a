//go:build integration && golden

package integration

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// make test-golden: the Debian golden image of `make golden-image`
// (BIGFLEET_GOLDEN_IMAGE) as bin/libvirt's --image, booted from its own disk
// (no --kernel, BIOS), driven over gRPC as BigFleet does: Create → IDLE,
// Configure (the image's bootstrap hook runs under systemd; the blob's
// sha256 it records in the guest must be the one sent) → Drain → Delete
// with the domain and its volumes gone. The same flow on the initramfs test
// guest gives the Configure time to compare with. Times go to
// out/test-golden-times.txt.

type goldenRun struct {
	name     string
	image    string   // volume in the pool
	boot     []string // extra flags (direct kernel boot for the initramfs guest)
	systemd  bool     // the real image: check systemd, the hooks' records
	agentMax time.Duration
}

func TestGoldenImageLifecycle(t *testing.T) {
	e := loadEnv(t)
	img := os.Getenv("BIGFLEET_GOLDEN_IMAGE")
	if img == "" {
		t.Fatal("BIGFLEET_GOLDEN_IMAGE is not set (make test-golden sets it from make golden-image)")
	}
	vol := goldenPoolVolume(t, e, img)
	bin := providerBinary(t)
	runs := []goldenRun{
		{name: strings.TrimSuffix(filepath.Base(img), ".qcow2") + "-bios", image: vol, systemd: true, agentMax: 8 * time.Minute},
		{name: "initramfs", image: e.Image, agentMax: 3 * time.Minute,
			boot: []string{"--kernel=" + e.Kernel, "--initrd=" + e.Initrd, "--cmdline=" + e.Cmdline}},
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) { goldenLifecycle(t, e, bin, r) })
	}
}

// goldenUserData is the --base-user-data of the real image's run.
const goldenUserData = `#cloud-config
write_files:
  - path: /etc/bigfleet/base-user-data.marker
    content: from the NoCloud seed
`

func goldenLifecycle(t *testing.T, e env, bin string, r goldenRun) {
	types := filepath.Join(t.TempDir(), "types.json")
	if err := os.WriteFile(types, []byte(`[{"name": "golden", "vcpu": 1, "memory_mib": 1024}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	offerings := filepath.Join(t.TempDir(), "offerings.json")
	if err := os.WriteFile(offerings, []byte(`[{"instance_type": "golden", "zone": "local", "capacity_type": "on_demand", "count": 1}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--image=" + r.image, "--instance-types=" + types, "--offerings=" + offerings,
		"--agent-wait=" + r.agentMax.String()}, r.boot...)
	if r.systemd {
		// The generic part of a node's setup: cloud-init runs the operator's
		// --base-user-data from the NoCloud seed on first boot.
		userData := filepath.Join(t.TempDir(), "user-data")
		if err := os.WriteFile(userData, []byte(goldenUserData), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--base-user-data="+userData)
	}
	p := startGoldenBinary(t, e, bin, "it-golden", args)
	ctx, cancel := context.WithTimeout(t.Context(), r.agentMax+6*time.Minute)
	defer cancel()

	id := p.slot(t, "local").GetId()
	t0 := time.Now()
	m := p.transition(t, ctx, "Create", &pb.CreateRequest{MachineId: id}, pb.MachineState_MACHINE_STATE_IDLE)
	domain := strings.TrimPrefix(m.GetHost().GetRef(), "local/")
	t.Cleanup(func() { cleanupDomain(t, e, domain) })
	created := time.Since(t0)

	// Boot to agent: from Create's start until the agent answers, through
	// a backend of our own on the same host (guest-exec diagnostics only).
	diag := newBackend(t, e, "it-golden")
	pl := backend.Placement{Zone: "local", Domain: domain}
	agent, err := diag.AgentClient(pl)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithDeadline(ctx, t0.Add(r.agentMax))
	err = agent.WaitReady(wctx)
	wcancel()
	if err != nil {
		t.Fatalf("%v%s", err, qemuLogTail(domain))
	}
	bootToAgent := time.Since(t0)
	guestShell := func(line string) string {
		t.Helper()
		return strings.TrimSpace(guestRun(t, diag, pl, "/bin/sh", "-c", line))
	}

	blob := make([]byte, 100<<10) // more than two 48 KiB chunks, binary
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	m = p.transition(t, ctx, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-golden",
		BootstrapBlob: blob}, pb.MachineState_MACHINE_STATE_CONFIGURED)
	configured := time.Since(t1)
	if m.GetCluster() != "c-golden" {
		t.Fatalf("configured machine %+v", m)
	}
	bootInfo := ""
	if r.systemd {
		// Read-only diagnostics in the guest: the hook's record of the blob
		// and its mode, PID 1, the agent as a systemd unit, containerd.
		out := guestShell(`printf '%s|%s|%s|%s|%s|%s\n' "$(cat /var/lib/bigfleet/blob.sha256)" ` +
			`"$(stat -c %a /var/lib/bigfleet/join.blob)" "$(cat /proc/1/comm)" "$(systemctl is-active qemu-guest-agent)" ` +
			`"$(systemctl is-active containerd)" "$(cat /var/lib/bigfleet/cluster)"`)
		want := fmt.Sprintf("%s|600|systemd|active|active|c-golden", sha(blob))
		if out != want {
			t.Fatalf("in the guest after Configure: %q, want %q", out, want)
		}
		// cloud-init's marker from --base-user-data is there too.
		out = guestShell(`cat /etc/bigfleet/base-user-data.marker`)
		if out != "from the NoCloud seed" {
			t.Fatalf("the base user-data's file in the guest: %q", out)
		}
		// The agent refuses what the provider does not use.
		if out := virsh(t, e, "qemu-agent-command", domain, `{"execute":"guest-get-time"}`); strings.Contains(out, `"return"`) {
			t.Fatalf("guest-get-time answered (%s): qemu-ga is not limited to the provider's RPCs", out)
		} else if !strings.Contains(out, "disabled") && !strings.Contains(out, "not allowed") {
			t.Fatalf("guest-get-time refused for another reason: %s", out)
		}
		// Where the boot's time went (the readiness hook waits for it, so
		// it bounds Configure on a freshly created machine).
		bootInfo = "; guest: " + strings.ReplaceAll(guestShell(
			`systemd-analyze time | head -n1; systemd-analyze blame --no-pager | head -n3 | sed 's/^ *//'`), "\n", ", ")
	}
	t2 := time.Now()
	p.transition(t, ctx, "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: 5}, pb.MachineState_MACHINE_STATE_IDLE)
	drained := time.Since(t2)
	if r.systemd {
		out := guestShell(`test ! -e /var/lib/bigfleet/cluster && test ! -e /var/lib/bigfleet/join.blob && tail -n1 /var/lib/bigfleet/drain.log`)
		if out != "drained c-golden (force=0)" {
			t.Fatalf("after Drain the guest says %q", out)
		}
	}
	// Configure again on the booted node: the hook's and the readiness
	// check's own cost, without the first boot's wait.
	t3 := time.Now()
	if m := p.transition(t, ctx, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-golden-2",
		BootstrapBlob: blob[:1024]}, pb.MachineState_MACHINE_STATE_CONFIGURED); m.GetCluster() != "c-golden-2" {
		t.Fatalf("reconfigured machine %+v", m)
	}
	reconfigured := time.Since(t3)
	p.transition(t, ctx, "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: 5}, pb.MachineState_MACHINE_STATE_IDLE)
	p.transition(t, ctx, "Delete", &pb.DeleteRequest{MachineId: id}, pb.MachineState_MACHINE_STATE_SPECULATIVE)
	if strings.Contains(virsh(t, e, "list", "--all", "--name"), domain) ||
		strings.Contains(virsh(t, e, "vol-list", e.Pool), domain) {
		t.Fatal("Delete left the domain or its volumes")
	}
	line := fmt.Sprintf("%s (accel %s): create→IDLE %s, boot-to-agent %s, Configure→CONFIGURED %s, Drain %s, "+
		"Configure on the booted node %s",
		r.name, e.Accel, created.Round(100*time.Millisecond), bootToAgent.Round(100*time.Millisecond),
		configured.Round(100*time.Millisecond), drained.Round(100*time.Millisecond),
		reconfigured.Round(100*time.Millisecond)) + bootInfo
	t.Log("TIMING " + line)
	_ = os.MkdirAll("../../out", 0o755)
	f, err := os.OpenFile("../../out/test-golden-times.txt", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintln(f, line)
		f.Close()
	}
}

// startGoldenBinary runs bin/libvirt on the env's host with extra flags.
func startGoldenBinary(t *testing.T, e env, bin, provider string, extra []string) *binProc {
	t.Helper()
	return serveBinary(t, bin, func(addr string) []string {
		return append([]string{"--addr=" + addr, "--metrics-addr=", "--provider=" + provider,
			"--connect=local=" + e.URI, "--storage-pool=" + e.Pool, "--network=" + e.Network,
			"--seed-count=1", "--reconcile-interval=5s", "--log-format=text", "--domain-type=" + e.DomainType,
			"--state=" + filepath.Join(t.TempDir(), "state.db"), callTimeoutArg}, extra...)
	})
}
