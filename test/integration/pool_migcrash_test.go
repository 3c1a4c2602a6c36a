//go:build integration && pool

package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// TestPoolMigrateCrash SIGKILLs bin/libvirt at each phase of a live
// migration of a CONFIGURED machine between the two daemons, restarts it
// on its state, and requires, once reconcile has run: exactly one running
// copy of the domain (none paused), the machine recorded where it runs,
// the guest's RAM (the blob digest Configure wrote to tmpfs) and its disk
// (the blob file Configure wrote) intact; then a second migration to the
// same destination replaces the overlay the dead provider left there. The migration is slowed
// (migrate-setspeed) so it can be caught mid copy; "after copy" stops the
// provider (SIGSTOP) while QEMU copies, so the source's perform step ends
// with no client to drive finish/confirm, and kills it once libvirt shows
// the source paused by the migration.
func TestPoolMigrateCrash(t *testing.T) {
	pe := loadPoolEnv(t)
	phases := []string{"before copy", "mid copy", "after copy"}
	if only := os.Getenv("BIGFLEET_MIGCRASH_PHASE"); only != "" {
		phases = []string{only}
	}
	for _, phase := range phases {
		t.Run(strings.ReplaceAll(phase, " ", "_"), func(t *testing.T) { migrateCrash(t, pe, phase) })
	}
}

func migrateCrash(t *testing.T, pe poolEnv, phase string) {
	state := filepath.Join(t.TempDir(), "state.db")
	name := "it-pmc" + phase[:1]
	p := startPool(t, pe, name, pe.poolHosts(nil), 1, "--state="+state)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	id := p.slots(t, 1)[0]
	where := p.createAll(t, ctx, pe, id)
	from, dom := where[id][0], where[id][1]
	to := map[string]string{sysHost: otherHost, otherHost: sysHost}[from]
	t.Cleanup(func() {
		cleanupDomain(t, env{URI: pe.uri(to), Pool: pe.Pool}, dom)
		cleanupDomain(t, env{URI: pe.uri(from), Pool: pe.Pool}, dom)
	})
	blob := bytes.Repeat([]byte("crash"), 3000)
	p.transition(t, ctx, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-crash", BootstrapBlob: blob},
		pb.MachineState_MACHINE_STATE_CONFIGURED)
	ram := agentCat(t, pe.uri(from), dom, "/run/bigfleet/blob.sha256")
	disk := agentCat(t, pe.uri(from), dom, "/opt/bigfleet/bootstrap.blob")
	if ram != sha(blob) || disk == "" {
		t.Fatalf("before: RAM digest %q, disk blob %d bytes", ram, len(disk))
	}
	if phase != "before copy" {
		virsh(t, env{URI: pe.uri(from)}, "migrate-setspeed", dom, "--bandwidth", "2") // MiB/s
	}
	go func() { // the call dies with the provider
		var res adminv1.MigrateMachineResponse
		_ = p.admin.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/MigrateMachine", &adminv1.MigrateMachineRequest{Id: id, ToHost: to}, &res)
	}()
	landIn(t, pe, p, phase, from, dom)
	_ = p.cmd.Process.Kill()
	<-p.done
	t.Logf("%s: killed with the source %q, the destination %q", phase, domStateOn(t, pe, from, dom), domStateOn(t, pe, to, dom))

	paused := domStateOn(t, pe, from, dom) == "paused (migrating)"
	t.Logf("%s: before the restart: the source %q, the destination %q", phase, domStateOn(t, pe, from, dom), domStateOn(t, pe, to, dom))
	p2 := startPool(t, pe, name, pe.poolHosts(nil), 1, "--state="+state)
	if d := os.Getenv("BIGFLEET_MIGCRASH_LOG"); d != "" {
		t.Cleanup(func() { _ = os.WriteFile(d, []byte(p.out.String()+"\n=== restarted ===\n"+p2.out.String()), 0o644) })
	}
	var runsOn string
	waitUntil(t, 90*time.Second, "exactly one running copy and none paused", func() bool {
		a, b := domStateOn(t, pe, from, dom), domStateOn(t, pe, to, dom)
		switch {
		case strings.HasPrefix(a, "running") && b == "":
			runsOn = from
		case strings.HasPrefix(b, "running") && a == "":
			runsOn = to
		default:
			return false
		}
		if paused && !strings.Contains(p2.out.String(), "reconcile: interrupted migration recovered") {
			return false // left paused: only the recovery may resume it, and must say so
		}
		m := p2.get(t, id)
		return m.GetHost().GetRef() == poolZone+"/"+runsOn+"/"+dom && m.GetState() == pb.MachineState_MACHINE_STATE_CONFIGURED
	})
	if got := agentCat(t, pe.uri(runsOn), dom, "/run/bigfleet/blob.sha256"); got != ram {
		t.Errorf("RAM: blob digest %q after, %q before", got, ram)
	}
	if got := agentCat(t, pe.uri(runsOn), dom, "/opt/bigfleet/bootstrap.blob"); got != disk {
		t.Errorf("disk: the blob file differs after (%d bytes, %d before)", len(got), len(disk))
	}
	t.Logf("%s: the VM runs on %s (%s; migrated from %s); recovery log: %q", phase, runsOn, domStateOn(t, pe, runsOn, dom), from, recoveryLines(p2.out.String()))
	if runsOn != from {
		return
	}
	// The dead provider's destination overlay is still on that host: the
	// next migration there deletes it and makes a fresh one (never reused:
	// its blocks are not the guest's), and the guest arrives intact.
	left := volOnHost(t, pe, to, dom+".qcow2")
	virsh(t, env{URI: pe.uri(from)}, "migrate-setspeed", dom, "--bandwidth", "10000") // the slowdown stays with the domain
	p2.migrate(t, ctx, id, to)
	if left && !strings.Contains(p2.out.String(), "deleted a volume an earlier migration left on the destination") {
		t.Errorf("the leftover overlay on %s was not replaced", to)
	}
	if got := agentCat(t, pe.uri(to), dom, "/run/bigfleet/blob.sha256"); got != ram {
		t.Errorf("RAM after the second migration: %q", got)
	}
	if got := agentCat(t, pe.uri(to), dom, "/opt/bigfleet/bootstrap.blob"); got != disk {
		t.Errorf("disk after the second migration: %d bytes, %d before", len(got), len(disk))
	}
	t.Logf("%s: migrated again to %s (a leftover overlay was there: %v)", phase, to, left)
}

// landIn returns once the migration is in the phase to kill it in.
func landIn(t *testing.T, pe poolEnv, p *poolProvider, phase, from, dom string) {
	switch phase {
	case "before copy":
		time.Sleep(100 * time.Millisecond) // the call is in: the destination being prepared, no copy yet
	case "mid copy":
		waitUntil(t, 60*time.Second, "the migration job to copy", func() bool {
			return jobProcessed(t, pe, from, dom)
		})
	case "after copy":
		waitUntil(t, 60*time.Second, "the migration job to copy", func() bool { return jobProcessed(t, pe, from, dom) })
		must(t, p.cmd.Process.Signal(syscall.SIGSTOP))
		virsh(t, env{URI: pe.uri(from)}, "migrate-setspeed", dom, "--bandwidth", "10000") // MiB/s: as fast as it goes here
		waitUntil(t, 120*time.Second, "the source paused by the migration", func() bool {
			return domStateOn(t, pe, from, dom) == "paused (migrating)"
		})
	}
}

// jobProcessed: the source's migration job has moved data.
func jobProcessed(t *testing.T, pe poolEnv, host, dom string) bool {
	out, err := virshErr(env{URI: pe.uri(host)}, "domjobinfo", dom)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.SplitN(line, ":", 2); len(f) == 2 && strings.TrimSpace(f[0]) == "Data processed" {
			return !strings.HasPrefix(strings.TrimSpace(f[1]), "0.000")
		}
	}
	return false
}

// domStateOn is `virsh domstate --reason`, "" when the host has no such domain.
func domStateOn(t *testing.T, pe poolEnv, host, dom string) string {
	out, err := virshErr(env{URI: pe.uri(host)}, "domstate", "--reason", dom)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

func recoveryLines(out string) []string {
	var l []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "interrupted migration") {
			l = append(l, line)
		}
	}
	return l
}

func virshErr(e env, args ...string) (string, error) {
	out, err := exec.Command("virsh", append([]string{"-q", "-c", e.URI}, args...)...).CombinedOutput()
	return string(out), err
}
