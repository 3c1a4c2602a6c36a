//go:build integration && lab

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// TestLabMigrateSSH (issue 38 item 7) live-migrates in a zone of the two
// qemu+libssh hosts, lab4 (libvirt 9.0, QEMU 7.2) and lab2 (11.3, QEMU
// 10), whose libvirtd asks polkit about every call under the shipped rule.
// A machine created on lab2 has machine type pc-i440fx-10.0, which QEMU
// 7.2 cannot run: its migration is refused before any work, naming lab4
// and the machine type, and the VM stays running on lab2. A machine
// created on lab4 (pc-i440fx-7.2) goes to lab2 and back: the rule allows
// what a migration needs.
func TestLabMigrateSSH(t *testing.T) {
	e := loadLab(t)
	hosts := e.labHosts(t, e.HostsZone).only("lab2", "lab4")
	p := startLab(t, e, "lab-migssh", hosts, 2, nil, "lab2", "lab4")
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	older := p.slotIn(t, "lab")
	p.createOn(t, older, "lab4", "lab2")
	newer := p.slotIn(t, "lab")
	p.createOn(t, newer, "lab2", "lab4")
	oldDom, newDom := refDomain(p.machine(t, older)), refDomain(p.machine(t, newer))

	err := p.conn.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/MigrateMachine",
		&adminv1.MigrateMachineRequest{Id: newer}, &adminv1.MigrateMachineResponse{})
	if err == nil || !strings.Contains(err.Error(), "host lab4") || !strings.Contains(err.Error(), "pc-i440fx-10.0") {
		t.Fatalf("migrating a pc-i440fx-10.0 machine off lab2: %v; want a refusal naming lab4 and the machine type", err)
	}
	t.Logf("MIGDEST refused: %v", err)
	if st := labVirsh(t, e, "lab2", "domstate", newDom); st != "running" {
		t.Fatalf("after the refusal the domain on lab2 is %q", st)
	}
	if out := labVirsh(t, e, "lab4", "list", "--all", "--name"); strings.Contains(out, newDom) {
		t.Fatal("a refused migration defined the domain on lab4")
	}
	if out := labVirsh(t, e, "lab4", "vol-list", "--pool", "bigfleet"); strings.Contains(out, newDom) {
		t.Fatalf("a refused migration left volumes on lab4:\n%s", out)
	}

	res := p.migrateTo(t, ctx, older, "") // placement: lab2 is the only host that fits
	if res.GetFromHost() != "lab4" || res.GetToHost() != "lab2" || labVirsh(t, e, "lab2", "domstate", oldDom) != "running" {
		t.Fatalf("lab4 → lab2 over libssh: %v", res)
	}
	back := p.migrateTo(t, ctx, older, "lab4")
	if back.GetToHost() != "lab4" || labVirsh(t, e, "lab4", "domstate", oldDom) != "running" {
		t.Fatalf("lab2 → lab4 over libssh: %v", back)
	}
	for _, id := range []string{older, newer} {
		p.mutate(t, "Delete", &pb.DeleteRequest{MachineId: id})
		p.await(t, id, 2*time.Minute, pb.MachineState_MACHINE_STATE_SPECULATIVE)
	}
}
