//go:build integration && lab

package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// TestLabMigrate (check 6) live-migrates a CONFIGURED machine between two
// lab hosts over the lab network, encrypted: lab1 (libvirt 9.0, QEMU 7.2)
// and lab3 (11.3, QEMU 10), both reached over qemu+tls, in one zone. The
// guest's RAM-held file (what Configure left in its tmpfs) is read back on
// the destination, the source's libvirtd shows QEMU was given the TLS
// credentials for the stream, and the machine is migrated back and deleted.
func TestLabMigrate(t *testing.T) {
	e := loadLab(t)
	hosts := e.labHosts(t, e.HostsZone).only("lab1", "lab3")
	p := startLab(t, e, "lab-mig", hosts, 2, nil, "lab1", "lab3")
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	id := p.slotIn(t, "lab")
	p.mutate(t, "Create", &pb.CreateRequest{MachineId: id})
	m := p.await(t, id, 3*time.Minute, pb.MachineState_MACHINE_STATE_IDLE)
	from, dom := refHost(m), refDomain(m)
	to := map[string]string{"lab1": "lab3", "lab3": "lab1"}[from]
	blob := bytes.Repeat([]byte("lab-migrate"), 3000)
	p.mutate(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-lab", BootstrapBlob: blob})
	p.await(t, id, 3*time.Minute, pb.MachineState_MACHINE_STATE_CONFIGURED)
	if got := labAgentCat(t, e, from, dom, "/run/bigfleet/blob.sha256"); got != sha(blob) {
		t.Fatalf("blob sha256 in the guest on %s: %q", from, got)
	}
	srcLog := e.hostFile(from, "var/log/libvirt/libvirtd.log")
	logBefore := fileSize(srcLog)

	res := p.migrateTo(t, ctx, id, to)
	if res.GetFromHost() != from || res.GetToHost() != to {
		t.Fatalf("migrated %s → %s, want %s → %s", res.GetFromHost(), res.GetToHost(), from, to)
	}
	if st := labVirsh(t, e, to, "domstate", dom); st != "running" {
		t.Fatalf("domain on %s is %q after the migration", to, st)
	}
	if out := labVirsh(t, e, from, "list", "--all", "--name"); strings.Contains(out, dom) {
		t.Fatalf("domain still defined on %s after the migration", from)
	}
	after := p.machine(t, id)
	if refHost(after) != to || after.GetState() != pb.MachineState_MACHINE_STATE_CONFIGURED || after.GetLastError() != "" {
		t.Fatalf("after the migration BigFleet sees %v, want the same CONFIGURED machine on %s", after, to)
	}
	// The RAM came along over the network.
	if got := labAgentCat(t, e, to, dom, "/run/bigfleet/blob.sha256"); got != sha(blob) {
		t.Fatalf("blob sha256 in the guest on %s after the migration: %q", to, got)
	}
	// Encrypted: the source's QEMU was handed the TLS credentials object for
	// the migration stream (libvirt logs its monitor traffic at debug).
	if tail := fileFrom(t, srcLog, logBefore); !strings.Contains(tail, "objlibvirt_migrate_tls0") {
		t.Fatalf("the source's libvirtd log has no migration TLS credentials object since the migration began")
	}

	p.mutate(t, "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: 1})
	p.await(t, id, 2*time.Minute, pb.MachineState_MACHINE_STATE_IDLE)
	back := p.migrateTo(t, ctx, id, from)
	if back.GetToHost() != from || labVirsh(t, e, from, "domstate", dom) != "running" {
		t.Fatalf("migrate back to %s: %v", from, back)
	}
	p.mutate(t, "Delete", &pb.DeleteRequest{MachineId: id})
	p.await(t, id, 2*time.Minute, pb.MachineState_MACHINE_STATE_SPECULATIVE)
	for _, h := range []string{from, to} {
		if out := labVirsh(t, e, h, "list", "--all", "--name"); strings.Contains(out, dom) {
			t.Errorf("domain %s left on %s after Delete", dom, h)
		}
	}
}

// mutate sends a lifecycle call and fails the test when it is refused.
func (p *labProvider) mutate(t *testing.T, method string, req proto.Message) {
	t.Helper()
	var ack pb.TransitionAck
	if err := p.call(t.Context(), method, req, &ack); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
}

// machine is the machine as Get returns it.
func (p *labProvider) machine(t *testing.T, id string) *pb.Machine {
	t.Helper()
	var m pb.Machine
	must(t, p.call(t.Context(), "Get", &pb.MachineRef{Id: id}, &m))
	return &m
}

// migrate calls MigrateMachine with the admin certificate and logs its time.
func (p *labProvider) migrateTo(t *testing.T, ctx context.Context, id, to string) *adminv1.MigrateMachineResponse {
	t.Helper()
	var res adminv1.MigrateMachineResponse
	t0 := time.Now()
	if err := p.conn.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/MigrateMachine",
		&adminv1.MigrateMachineRequest{Id: id, ToHost: to}, &res); err != nil {
		t.Fatalf("MigrateMachine %s to %q: %v", id, to, err)
	}
	t.Logf("TIMING MigrateMachine over TLS %s %s → %s: %s (server: %s; %s)", id, res.GetFromHost(), res.GetToHost(),
		time.Since(t0).Round(time.Millisecond), res.GetTook().AsDuration().Round(time.Millisecond), res.GetPlacement())
	return &res
}

// labVirsh runs virsh as root inside a lab host and returns its trimmed output.
func labVirsh(t *testing.T, e labEnv, host string, args ...string) string {
	t.Helper()
	out, err := exec.Command(e.Script, append([]string{"exec", host, "virsh", "-q", "-c", "qemu:///system"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh %s on %s: %v\n%s", strings.Join(args, " "), host, err, out)
	}
	return strings.TrimSpace(string(out))
}

// labAgentCat reads a guest file through its agent, via virsh inside the host.
func labAgentCat(t *testing.T, e labEnv, host, domain, path string) string {
	t.Helper()
	return agentCatVia(t, func(args ...string) string { return labVirsh(t, e, host, args...) }, domain, path)
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// fileFrom is the file's content from offset on.
func fileFrom(t *testing.T, path string, offset int64) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	must(t, err)
	if offset > int64(len(raw)) {
		offset = 0
	}
	return string(raw[offset:])
}
