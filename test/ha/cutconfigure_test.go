//go:build ha

package ha

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// TestRealLibvirtFailoverMidConfigure (make test-ha-real; issue 41 "an
// operation cut by the failover finishes or rolls back"): the leader is
// SIGKILLed as soon as the Configure's intent is on the domain (the guest
// is still booting: its bootstrap hook cannot have started). The new
// leader, which starts from the hosts alone, takes the machine as that
// Configure cut short and ends it as the guest tells: rolled back to IDLE
// once the guest answers that the hook never started, the intent cleared
// from the domain. Before the intent it came back plain IDLE, adopted from
// the bare domain, with no word of the Configure.
func TestRealLibvirtFailoverMidConfigure(t *testing.T) {
	uri := os.Getenv("BIGFLEET_LIBVIRT_URI")
	if uri == "" {
		t.Skip("make test-ha-real sources the libvirt environment (make env-up)")
	}
	k := startKube(t)
	flags := []string{"--connect=" + uri, "--provider=" + realProvider, "--seed-count=2",
		"--image=" + os.Getenv("BIGFLEET_IMAGE"), "--storage-pool=" + os.Getenv("BIGFLEET_POOL"),
		"--network=" + os.Getenv("BIGFLEET_NETWORK"), "--kernel=" + os.Getenv("BIGFLEET_KERNEL"),
		"--initrd=" + os.Getenv("BIGFLEET_INITRD"), "--cmdline=" + os.Getenv("BIGFLEET_CMDLINE"),
		"--domain-type=" + os.Getenv("BIGFLEET_DOMAIN_TYPE"), "--wait-booted=false", "--configure-timeout=5m"}
	a := newProviderOn(t, k, "pod-a", "midconf", realTiming, flags...)
	b := newProviderOn(t, k, "pod-b", "midconf", realTiming, flags...)
	a.start(t)
	b.start(t)
	leader, _ := waitLeader(t, 30*time.Second, a, b)
	standby := other(leader, a, b)
	t.Cleanup(func() { cleanupDomains(t, uri) })
	if !waitReady(standby, leader, 10*time.Second) {
		t.Fatal("no settled leader")
	}
	id := slotIDs(t, leader)[0]
	if err := leader.create(t.Context(), id); err != nil {
		t.Fatalf("Create %s: %v", id, err)
	}
	if m := waitState(t, leader, id, 3*time.Minute, stable); m.GetState() != pb.MachineState_MACHINE_STATE_IDLE {
		t.Fatalf("%s ended %v (%s)", id, m.GetState(), m.GetLastError())
	}
	dom := domainOf(t, uri, id)
	var ack pb.TransitionAck
	if err := leader.conn.Invoke(t.Context(), method+"Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-failover",
		BootstrapBlob: []byte("failover-blob")}, &ack); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	op := ack.GetOperationId()
	for start := time.Now(); virshMeta(t, uri, dom).Configure.OperationID != op; time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > time.Minute {
			t.Fatalf("the Configure's intent never reached the domain: %+v", virshMeta(t, uri, dom))
		}
	}
	killedAt := time.Now()
	_ = leader.cmd.Process.Signal(syscall.SIGKILL)
	<-leader.done
	if got, _ := waitLeader(t, 2*realTiming.bound(), standby); got != standby {
		t.Fatal("the standby did not take over")
	}
	t.Logf("standby %s served %s after the SIGKILL mid-Configure", standby.name, time.Since(killedAt).Round(time.Millisecond))
	m := waitState(t, standby, id, 5*time.Minute, stable)
	t.Logf("TIMING failover mid-Configure → %s in %s: %q", m.GetState(), time.Since(killedAt).Round(time.Millisecond), m.GetLastError())
	if m.GetState() != pb.MachineState_MACHINE_STATE_IDLE || !strings.Contains(m.GetLastError(), "rolled back to IDLE") || m.GetCluster() != "" {
		t.Fatalf("after the failover: %s cluster %q last_error %q; want IDLE rolled back as the guest told", m.GetState(), m.GetCluster(), m.GetLastError())
	}
	if md := virshMeta(t, uri, dom); md.Configure.Begun() || md.ClusterID != "" {
		t.Fatalf("domain after the rollback: intent %+v binding %q", md.Configure, md.ClusterID)
	}
	checkOneDomainEach(t, uri, standby)
}
