//go:build integration && pool

package integration

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// TestPoolMigrate live-migrates a CONFIGURED machine between the two real
// daemons through the admin API, checks with virsh that the domain (and
// its overlay volume) left the source for the destination, that BigFleet
// sees the same machine with only a new HostRef.ref, and that the guest
// kept running: a file it wrote in RAM (tmpfs) before is read back
// through the destination's daemon, and a Drain runs its hook there. Then
// the IDLE machine is migrated back by name and deleted.
func TestPoolMigrate(t *testing.T) {
	pe := loadPoolEnv(t)
	p := startPool(t, pe, "it-poolm", pe.poolHosts(nil), 2)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	id := p.slots(t, 1)[0]
	where := p.createAll(t, ctx, pe, id)
	from, dom := where[id][0], where[id][1]
	to := map[string]string{sysHost: otherHost, otherHost: sysHost}[from]
	t.Cleanup(func() { cleanupDomain(t, env{URI: pe.uri(to), Pool: pe.Pool}, dom) })

	blob := bytes.Repeat([]byte("migrate"), 2000)
	before := p.transition(t, ctx, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-migrate",
		BootstrapBlob: blob, ShardMetadata: map[string]string{"k": "v"}}, pb.MachineState_MACHINE_STATE_CONFIGURED)
	if got := agentCat(t, pe.uri(from), dom, "/run/bigfleet/blob.sha256"); got != sha(blob) {
		t.Fatalf("blob sha256 in the guest on %s: %q", from, got)
	}

	res := p.migrate(t, ctx, id, "")
	if res.GetFromHost() != from || res.GetToHost() != to {
		t.Fatalf("migrated %s → %s, want %s → %s", res.GetFromHost(), res.GetToHost(), from, to)
	}
	if !onHost(t, pe, to, dom) || onHost(t, pe, from, dom) {
		t.Fatalf("after the migration: on %s %v, on %s %v (virsh)", to, onHost(t, pe, to, dom), from, onHost(t, pe, from, dom))
	}
	if st := strings.TrimSpace(virsh(t, env{URI: pe.uri(to)}, "domstate", dom)); st != "running" {
		t.Errorf("domain on %s is %q", to, st)
	}
	// Both hosts have the golden image: only the overlay's blocks moved.
	if !strings.Contains(p.out.String(), "overlay copied (golden image on both hosts)") {
		t.Errorf("the provider did not log an incremental (NON_SHARED_INC) storage copy")
	}
	if volOnHost(t, pe, from, dom+".qcow2") || !volOnHost(t, pe, to, dom+".qcow2") {
		t.Errorf("overlay volume: on %s %v, on %s %v", from, volOnHost(t, pe, from, dom+".qcow2"), to, volOnHost(t, pe, to, dom+".qcow2"))
	}
	after := p.get(t, id)
	wantRef := poolZone + "/" + to + "/" + dom
	if after.GetHost().GetRef() != wantRef || after.GetState() != pb.MachineState_MACHINE_STATE_CONFIGURED ||
		after.GetCluster() != before.GetCluster() || after.GetShardMetadata()["k"] != "v" || after.GetLastError() != "" {
		t.Fatalf("after the migration BigFleet sees %v, want the same machine at %s", after, wantRef)
	}
	// The RAM came along: the guest's tmpfs still holds what Configure wrote.
	if got := agentCat(t, pe.uri(to), dom, "/run/bigfleet/blob.sha256"); got != sha(blob) {
		t.Errorf("blob sha256 in the guest on %s after the migration: %q", to, got)
	}
	p.transition(t, ctx, "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: 1}, pb.MachineState_MACHINE_STATE_IDLE)

	back := p.migrate(t, ctx, id, from)
	if back.GetToHost() != from || !onHost(t, pe, from, dom) || onHost(t, pe, to, dom) {
		t.Fatalf("migrate back to %s: %v (on %s %v)", from, back, from, onHost(t, pe, from, dom))
	}
	if m := p.get(t, id); m.GetState() != pb.MachineState_MACHINE_STATE_IDLE || m.GetHost().GetRef() != poolZone+"/"+from+"/"+dom {
		t.Fatalf("after migrating back: %v", m)
	}
	p.transition(t, ctx, "Delete", &pb.DeleteRequest{MachineId: id}, pb.MachineState_MACHINE_STATE_SPECULATIVE)
	if onHost(t, pe, from, dom) || onHost(t, pe, to, dom) {
		t.Errorf("domain %s left after Delete", dom)
	}
}

// migrate calls MigrateMachine with the admin certificate and logs its time.
func (p *poolProvider) migrate(t *testing.T, ctx context.Context, id, to string) *adminv1.MigrateMachineResponse {
	t.Helper()
	var res adminv1.MigrateMachineResponse
	t0 := time.Now()
	if err := p.admin.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/MigrateMachine",
		&adminv1.MigrateMachineRequest{Id: id, ToHost: to}, &res); err != nil {
		t.Fatalf("MigrateMachine %s to %q: %v", id, to, err)
	}
	t.Logf("TIMING MigrateMachine %s %s → %s: %s (server: %s; %s)", id, res.GetFromHost(), res.GetToHost(),
		time.Since(t0).Round(time.Millisecond), res.GetTook().AsDuration().Round(time.Millisecond), res.GetPlacement())
	return &res
}

// volOnHost says whether the named volume is in the host's pool (virsh).
func volOnHost(t *testing.T, pe poolEnv, host, vol string) bool {
	t.Helper()
	for _, line := range strings.Split(virsh(t, env{URI: pe.uri(host)}, "vol-list", pe.Pool), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == vol {
			return true
		}
	}
	return false
}
