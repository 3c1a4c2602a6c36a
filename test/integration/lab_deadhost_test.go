//go:build integration && lab

package integration

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// TestLabZoneDeadHost (issue 38): a zone of lab1 and lab3, lab3 powered
// off for good (its guests destroyed, its network cut) while the provider
// is down. After a clean restart on the same state file, before any
// declaration, a Create in the zone reaches IDLE on lab1 and a Delete of a
// machine on lab1 completes (one dead host used to freeze both). After
// `libvirtctl down lab3` (the admin API) the machine whose only copy was
// on lab3 is FAILED naming the declaration, and the zone's Creates and
// Deletes go on. lab3 then answers again with the stale domain of a
// machine released meanwhile: it is destroyed, never started, and the
// declaration ends.
func TestLabZoneDeadHost(t *testing.T) {
	e := loadLab(t)
	hosts := e.labHosts(t, e.HostsZone).only("lab1", "lab3")
	const name = "lab-zdead"
	extra := []string{"--state=" + filepath.Join(t.TempDir(), "state.db")}
	p := startLab(t, e, name, hosts, 5, extra, "lab1", "lab3")
	ids := p.speculative(t, 5)
	onDead, onLive := ids[0], ids[1]
	p.createOn(t, onDead, "lab3", "lab1")
	p.createOn(t, onLive, "lab1", "lab3")
	deadDomain := refDomain(p.machine(t, onDead))
	p.kill()

	labVirsh(t, e, "lab3", "destroy", deadDomain) // powered off: its guests are gone
	e.lab(t, "fault", "lab3", "partition")
	healed := false
	t.Cleanup(func() {
		if !healed {
			e.lab(t, "heal", "lab3")
		}
	})
	p = startLab(t, e, name, hosts, 5, extra, "lab1")

	t0 := time.Now()
	p.mutate(t, "Create", &pb.CreateRequest{MachineId: ids[2]})
	if m := p.await(t, ids[2], 3*time.Minute, pb.MachineState_MACHINE_STATE_IDLE); refHost(m) != "lab1" {
		t.Fatalf("Create with lab3 dead went to %q", refHost(m))
	}
	t.Logf("DEAD before the declaration, after a clean restart: a Create reached IDLE on lab1 in %s", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	p.mutate(t, "Delete", &pb.DeleteRequest{MachineId: onLive})
	p.await(t, onLive, 3*time.Minute, pb.MachineState_MACHINE_STATE_SPECULATIVE)
	t.Logf("DEAD before the declaration: a Delete of a machine on lab1 completed in %s", time.Since(t0).Round(time.Millisecond))

	t0 = time.Now()
	must(t, p.conn.Invoke(t.Context(), "/libvirtprovider.admin.v1.AdminService/DeclareHostDown",
		&adminv1.DeclareHostDownRequest{Host: "lab3", Reason: "it: powered off for good"}, &adminv1.DeclareHostDownResponse{}))
	m := p.await(t, onDead, time.Minute, pb.MachineState_MACHINE_STATE_FAILED)
	if want := "host lab/lab3 declared down: it: powered off for good"; m.GetLastError() != want {
		t.Fatalf("last_error %q, want %q", m.GetLastError(), want)
	}
	t.Logf("DEAD the machine on lab3 FAILED %s after the declaration", time.Since(t0).Round(time.Millisecond))
	p.mutate(t, "Create", &pb.CreateRequest{MachineId: ids[3]})
	p.await(t, ids[3], 3*time.Minute, pb.MachineState_MACHINE_STATE_IDLE)
	t.Logf("DEAD from the declaration to the zone's first successful Create: %s", time.Since(t0).Round(time.Millisecond))
	p.mutate(t, "Delete", &pb.DeleteRequest{MachineId: ids[2]})
	p.await(t, ids[2], 3*time.Minute, pb.MachineState_MACHINE_STATE_SPECULATIVE)
	t.Logf("DEAD from the declaration to the zone's first successful Delete (after that Create): %s", time.Since(t0).Round(time.Millisecond))

	// The operator returns the FAILED slot; lab3 answers again, still
	// declared down, with that machine's stale domain: it is destroyed,
	// never started.
	must(t, p.conn.Invoke(t.Context(), "/libvirtprovider.admin.v1.AdminService/ReleaseMachine",
		&adminv1.ReleaseMachineRequest{Id: onDead}, &adminv1.ReleaseMachineResponse{}))
	p.await(t, onDead, time.Minute, pb.MachineState_MACHINE_STATE_SPECULATIVE)
	e.lab(t, "heal", "lab3")
	healed = true
	t0 = time.Now()
	waitUntil(t, 2*time.Minute, "lab3's stale domain destroyed by the fenced rejoin", func() bool {
		out := labVirsh(t, e, "lab3", "list", "--all", "--name")
		if strings.Contains(labVirsh(t, e, "lab3", "list", "--name"), deadDomain) {
			t.Fatalf("the stale domain %s runs on lab3: started on a fenced rejoin", deadDomain)
		}
		return !strings.Contains(out, deadDomain)
	})
	t.Logf("DEAD lab3 rejoined fenced: its stale domain destroyed %s after it answered", time.Since(t0).Round(time.Millisecond))
	must(t, p.conn.Invoke(t.Context(), "/libvirtprovider.admin.v1.AdminService/DeclareHostUp",
		&adminv1.DeclareHostUpRequest{Host: "lab3"}, &adminv1.DeclareHostUpResponse{}))
	if h := p.host(t, "lab3"); h.GetDown() != nil {
		t.Fatalf("lab3 still declared down: %v", h.GetDown())
	}
}

// createOn creates id on host, by cordoning the zone's other host for the
// Create (admin API), and waits for IDLE.
func (p *labProvider) createOn(t *testing.T, id, host, other string) {
	t.Helper()
	must(t, p.conn.Invoke(t.Context(), "/libvirtprovider.admin.v1.AdminService/CordonHost",
		&adminv1.CordonHostRequest{Host: other, Reason: "it: steer a Create"}, &adminv1.CordonHostResponse{}))
	p.mutate(t, "Create", &pb.CreateRequest{MachineId: id})
	m := p.await(t, id, 3*time.Minute, pb.MachineState_MACHINE_STATE_IDLE)
	must(t, p.conn.Invoke(t.Context(), "/libvirtprovider.admin.v1.AdminService/UncordonHost",
		&adminv1.UncordonHostRequest{Host: other}, &adminv1.UncordonHostResponse{}))
	if refHost(m) != host {
		t.Fatalf("%s created on %q, want %s", id, refHost(m), host)
	}
}
