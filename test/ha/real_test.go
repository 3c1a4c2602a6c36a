//go:build ha

package ha

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// realTiming leaves real libvirt calls on a busy 2-core machine a 2 s
// bound inside the lease's margin.
var realTiming = timing{"real libvirt 8s/5s/1s", 8 * time.Second, 5 * time.Second, time.Second, "2s"}

const realProvider = "ha41"

// TestRealLibvirtFailover (make test-ha-real, under the real-libvirt lock):
// two providers on the same libvirtd; the leader is SIGKILLed right after
// it accepted a Delete of one machine and a Create of another. The new
// leader rebuilds from the host and the shared journal: the Delete is
// carried out (a free slot, no domain), never the machine IDLE again, and
// the cut Create (acknowledged, its domain perhaps not yet defined)
// finishes IDLE, never a free slot again. One domain per machine, none
// left over.
func TestRealLibvirtFailover(t *testing.T) {
	uri := os.Getenv("BIGFLEET_LIBVIRT_URI")
	if uri == "" {
		t.Skip("make test-ha-real sources the libvirt environment (make env-up)")
	}
	k := startKube(t)
	backend := []string{"--connect=" + uri, "--provider=" + realProvider, "--seed-count=3",
		"--image=" + os.Getenv("BIGFLEET_IMAGE"), "--storage-pool=" + os.Getenv("BIGFLEET_POOL"),
		"--network=" + os.Getenv("BIGFLEET_NETWORK"), "--kernel=" + os.Getenv("BIGFLEET_KERNEL"),
		"--initrd=" + os.Getenv("BIGFLEET_INITRD"), "--cmdline=" + os.Getenv("BIGFLEET_CMDLINE"),
		"--domain-type=" + os.Getenv("BIGFLEET_DOMAIN_TYPE"), "--wait-booted=false"}
	a := newProviderOn(t, k, "pod-a", "real", realTiming, backend...)
	b := newProviderOn(t, k, "pod-b", "real", realTiming, backend...)
	a.start(t)
	b.start(t)
	leader, _ := waitLeader(t, 30*time.Second, a, b)
	standby := other(leader, a, b)
	t.Cleanup(func() { cleanupDomains(t, uri) })
	if !waitReady(standby, leader, 10*time.Second) {
		t.Fatal("no settled leader")
	}
	checkStandby(t, standby, leader)
	ids := slotIDs(t, leader)
	first, cut := ids[0], ids[1]
	if err := leader.create(t.Context(), first); err != nil {
		t.Fatalf("Create %s: %v", first, err)
	}
	if m := waitState(t, leader, first, 3*time.Minute, stable); m.GetState() != pb.MachineState_MACHINE_STATE_IDLE {
		t.Fatalf("%s ended %v (%s) before any kill", first, m.GetState(), m.GetLastError())
	}
	if err := leader.deleteMachine(t.Context(), first); err != nil {
		t.Fatalf("Delete %s: %v", first, err)
	}
	if err := leader.create(t.Context(), cut); err != nil {
		t.Fatalf("Create %s: %v", cut, err)
	}
	killedAt := time.Now()
	_ = leader.cmd.Process.Signal(syscall.SIGKILL)
	<-leader.done
	if got, _ := waitLeader(t, 2*realTiming.bound(), standby); got != standby {
		t.Fatal("the standby did not take over")
	}
	t.Logf("standby %s served %s after the SIGKILL mid-Create", standby.name, time.Since(killedAt).Round(time.Millisecond))

	// IDLE here would be an acknowledged Delete lost (the lab measured it
	// before the journal carried every transition).
	if m := waitState(t, standby, first, 3*time.Minute, stable); m.GetState() != pb.MachineState_MACHINE_STATE_SPECULATIVE {
		t.Errorf("%s, whose Delete the old leader acknowledged, is %v (%s) on the new leader, want SPECULATIVE", first, m.GetState(), m.GetLastError())
	}
	// SPECULATIVE here would be an acknowledged Create lost (before the
	// shared journal it was: docs/ha.md).
	m := waitState(t, standby, cut, 3*time.Minute, stable)
	if m.GetState() != pb.MachineState_MACHINE_STATE_IDLE {
		t.Errorf("%s, whose Create the old leader acknowledged, ended %v (%s) on the new leader, want IDLE", cut, m.GetState(), m.GetLastError())
	}
	t.Logf("%s, cut by the kill, is %v on the new leader", cut, m.GetState())
	logTakeover(t, standby)
	if log, _ := os.ReadFile(standby.logFile); !strings.Contains(string(log), "took over the shared journal") || strings.Contains(string(log), "transitional=0 ") {
		t.Errorf("the new leader did not take the cut Create over from the journal:\n%s", standby.tail())
	}
	checkOneDomainEach(t, uri, standby)
}

func stable(m *pb.Machine) bool {
	switch m.GetState() {
	case pb.MachineState_MACHINE_STATE_IDLE, pb.MachineState_MACHINE_STATE_FAILED,
		pb.MachineState_MACHINE_STATE_SPECULATIVE, pb.MachineState_MACHINE_STATE_CONFIGURED:
		return true
	}
	return false
}

func slotIDs(t *testing.T, p *provider) []string {
	t.Helper()
	res, err := p.list(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range res.GetMachines() {
		if m.GetState() == pb.MachineState_MACHINE_STATE_SPECULATIVE {
			ids = append(ids, m.GetId())
		}
	}
	if len(ids) < 2 {
		t.Fatalf("want 2 free slots, got %v", ids)
	}
	return ids
}

// waitState polls the machine until done says so.
func waitState(t *testing.T, p *provider, id string, within time.Duration, done func(*pb.Machine) bool) *pb.Machine {
	t.Helper()
	deadline := time.Now().Add(within)
	var last *pb.Machine
	for time.Now().Before(deadline) {
		res, err := p.list(t.Context())
		if err == nil {
			for _, m := range res.GetMachines() {
				if m.GetId() == id {
					last = m
					if done(m) {
						return m
					}
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s not settled within %s: last %v\n%s", id, within, last, p.tail())
	return nil
}

func domains(t *testing.T, uri string) []string {
	out, err := exec.Command("virsh", "-c", uri, "list", "--all", "--name").Output()
	if err != nil {
		t.Fatalf("virsh list: %v", err)
	}
	var ds []string
	for _, l := range strings.Fields(string(out)) {
		if strings.HasPrefix(l, "bf-"+realProvider+"-") {
			ds = append(ds, l)
		}
	}
	return ds
}

// checkOneDomainEach: the host holds exactly one domain per machine the
// provider shows with a domain (IDLE, FAILED with a domain, ...), and none
// for a free slot.
func checkOneDomainEach(t *testing.T, uri string, p *provider) {
	t.Helper()
	ds := domains(t, uri)
	res, err := p.list(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, d := range ds {
		for _, m := range res.GetMachines() {
			if strings.Contains(d, "-"+strings.ToLower(m.GetId())+"-") {
				seen[m.GetId()]++
			}
		}
	}
	for _, m := range res.GetMachines() {
		n := seen[m.GetId()]
		if n > 1 {
			t.Errorf("%s runs %d times on the host", m.GetId(), n)
		}
		if m.GetState() == pb.MachineState_MACHINE_STATE_SPECULATIVE && n != 0 {
			t.Errorf("free slot %s has a domain on the host", m.GetId())
		}
	}
	t.Logf("host domains of provider %s: %v", realProvider, ds)
}

// cleanupDomains removes the test's domains and their volumes, whatever
// the test left.
func cleanupDomains(t *testing.T, uri string) {
	for _, d := range domains(t, uri) {
		_ = exec.Command("virsh", "-c", uri, "destroy", d).Run()
		_ = exec.Command("virsh", "-c", uri, "undefine", d, "--remove-all-storage", "--nvram").Run()
	}
}

// deleteMachine calls Delete through grpc-go, without a token.
func (p *provider) deleteMachine(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var res pb.TransitionAck
	return p.conn.Invoke(ctx, method+"Delete", &pb.DeleteRequest{MachineId: id}, &res)
}
