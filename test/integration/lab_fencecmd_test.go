//go:build integration && lab

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// TestLabFenceCommand (issue 38): a zone of lab1 and lab3 served with
// --fence-command and --host-down-after=15s. lab3 is cut off while its
// guest runs, the case where guessing would leave two copies: the
// provider waits out the delay, runs the command (here: the lab powers
// lab3 off, killing the guest), and only because it exited 0 declares
// lab3 down. The machine whose only copy was there is FAILED naming the
// declaration, the zone's Creates go on, and lab3, powered on again with
// the stale domain of the machine released meanwhile, rejoins fenced: the
// domain is destroyed, never started.
func TestLabFenceCommand(t *testing.T) {
	e := loadLab(t)
	hosts := e.labHosts(t, e.HostsZone).only("lab1", "lab3")
	dir := t.TempDir()
	calls := filepath.Join(dir, "fenced")
	fence := filepath.Join(dir, "fence.sh")
	must(t, os.WriteFile(fence, []byte(fmt.Sprintf("#!/bin/sh\necho \"$1 $2 $BIGFLEET_HOST\" >>%s\nexec %s fault \"$2\" poweroff\n", calls, e.Script)), 0o755))
	const name = "lab-fencecmd"
	extra := []string{"--state=" + filepath.Join(dir, "state.db"), "--fence-command=" + fence, "--host-down-after=15s"}
	p := startLab(t, e, name, hosts, 4, extra, "lab1", "lab3")
	ids := p.speculative(t, 4)
	onDead := ids[0]
	p.createOn(t, onDead, "lab3", "lab1")
	deadDomain := refDomain(p.machine(t, onDead))
	t.Cleanup(func() { e.lab(t, "heal", "lab3") }) // powers it on if the test stopped with it off

	t0 := time.Now()
	e.lab(t, "fault", "lab3", "partition") // the guest still runs: only a fence makes it safe
	m := p.await(t, onDead, 3*time.Minute, pb.MachineState_MACHINE_STATE_FAILED)
	took := time.Since(t0)
	if want := "host lab/lab3 declared down: fenced by fence.sh after "; !strings.HasPrefix(m.GetLastError(), want) {
		t.Fatalf("last_error %q, want it to start with %q", m.GetLastError(), want)
	}
	if got, err := os.ReadFile(calls); err != nil || strings.TrimSpace(string(got)) != "lab lab3 lab3" {
		t.Fatalf("fence command calls %q (%v), want one: lab lab3 lab3", got, err)
	}
	h := p.host(t, "lab3")
	if h.GetDown().GetBy() != "fence-command" {
		t.Fatalf("lab3's declaration: %v", h.GetDown())
	}
	t.Logf("FENCE partition → fence command → machine FAILED in %s", took.Round(time.Millisecond))
	if n := strings.Count(p.out.String(), "fence command succeeded; host declared down"); n != 1 {
		t.Fatalf("want one log line of the fence command's success")
	}

	t0 = time.Now()
	p.mutate(t, "Create", &pb.CreateRequest{MachineId: ids[1]})
	if m := p.await(t, ids[1], 3*time.Minute, pb.MachineState_MACHINE_STATE_IDLE); refHost(m) != "lab1" {
		t.Fatalf("Create with lab3 fenced went to %q", refHost(m))
	}
	t.Logf("FENCE from FAILED to the zone's next Create IDLE: %s", time.Since(t0).Round(time.Millisecond))

	must(t, p.conn.Invoke(t.Context(), "/libvirtprovider.admin.v1.AdminService/ReleaseMachine",
		&adminv1.ReleaseMachineRequest{Id: onDead}, &adminv1.ReleaseMachineResponse{}))
	p.await(t, onDead, time.Minute, pb.MachineState_MACHINE_STATE_SPECULATIVE)
	e.lab(t, "fault", "lab3", "poweron")
	t0 = time.Now()
	waitUntil(t, 2*time.Minute, "lab3's stale domain destroyed by the fenced rejoin", func() bool {
		if strings.Contains(labVirsh(t, e, "lab3", "list", "--name"), deadDomain) {
			t.Fatalf("the stale domain %s runs on lab3: started on a fenced rejoin", deadDomain)
		}
		return !strings.Contains(labVirsh(t, e, "lab3", "list", "--all", "--name"), deadDomain)
	})
	t.Logf("FENCE lab3 powered on: its stale domain destroyed %s after", time.Since(t0).Round(time.Millisecond))
	must(t, p.conn.Invoke(t.Context(), "/libvirtprovider.admin.v1.AdminService/DeclareHostUp",
		&adminv1.DeclareHostUpRequest{Host: "lab3"}, &adminv1.DeclareHostUpResponse{}))
	if got, _ := os.ReadFile(calls); strings.Count(string(got), "\n") != 1 {
		t.Fatalf("the fence command ran again: %q", got)
	}
}
