//go:build ha

package ha

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// leaseTerm reads the Lease as the leader's term: its uid and
// leaseTransitions.
func leaseTerm(t *testing.T, k *kube, name string) backend.LeaderTerm {
	t.Helper()
	l := readLease(t, k, name)
	var n int64
	if l.Spec.LeaseTransitions != nil {
		n = int64(*l.Spec.LeaseTransitions)
	}
	return backend.LeaderTerm{Lease: string(l.UID), N: n}
}

// readLease is the Lease as the apiserver holds it.
func readLease(t *testing.T, k *kube, name string) *coordinationv1.Lease {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", k.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "default"
	}
	l, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// domainOf is the host's domain of machine id (provider realProvider).
func domainOf(t *testing.T, uri, id string) string {
	t.Helper()
	for _, d := range domains(t, uri) {
		if strings.Contains(d, "-"+strings.ToLower(id)+"-") {
			return d
		}
	}
	t.Fatalf("no domain of %s on the host", id)
	return ""
}

func virshMeta(t *testing.T, uri, dom string) meta.Metadata {
	t.Helper()
	out, err := exec.Command("virsh", "-q", "-c", uri, "metadata", dom, "--uri", meta.NS).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh metadata %s: %v: %s", dom, err, out)
	}
	md, err := meta.Decode(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("decode metadata of %s: %v", dom, err)
	}
	return md
}

func virshSetMeta(t *testing.T, uri, dom string, md meta.Metadata) {
	t.Helper()
	s, err := md.Marshal(false)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("virsh", "-q", "-c", uri, "metadata", dom, "--uri", meta.NS, "--key", meta.Prefix,
		"--set", s, "--config", "--live").CombinedOutput(); err != nil {
		t.Fatalf("virsh metadata --set %s: %v: %s", dom, err, out)
	}
}

// TestRealLibvirtTerm (make test-ha-real; the split brain's second line,
// docs/ha.md): every domain a leader writes carries its term, the Lease's
// uid and leaseTransitions as the apiserver holds them; after a failover
// the new leader's writes carry the next term of the same Lease. Then a
// domain is made to carry a newer term still (as a replica that took the
// Lease since would write it): the leader, asked to Delete that machine,
// never touches the domain, steps down and exits naming the newer term.
func TestRealLibvirtTerm(t *testing.T) {
	uri := os.Getenv("BIGFLEET_LIBVIRT_URI")
	if uri == "" {
		t.Skip("make test-ha-real sources the libvirt environment (make env-up)")
	}
	k := startKube(t)
	backendFlags := []string{"--connect=" + uri, "--provider=" + realProvider, "--seed-count=3",
		"--image=" + os.Getenv("BIGFLEET_IMAGE"), "--storage-pool=" + os.Getenv("BIGFLEET_POOL"),
		"--network=" + os.Getenv("BIGFLEET_NETWORK"), "--kernel=" + os.Getenv("BIGFLEET_KERNEL"),
		"--initrd=" + os.Getenv("BIGFLEET_INITRD"), "--cmdline=" + os.Getenv("BIGFLEET_CMDLINE"),
		"--domain-type=" + os.Getenv("BIGFLEET_DOMAIN_TYPE"), "--wait-booted=false"}
	const lease = "term"
	a := newProviderOn(t, k, "pod-a", lease, realTiming, backendFlags...)
	b := newProviderOn(t, k, "pod-b", lease, realTiming, backendFlags...)
	a.start(t)
	b.start(t)
	first, _ := waitLeader(t, 30*time.Second, a, b)
	second := other(first, a, b)
	t.Cleanup(func() { cleanupDomains(t, uri) })
	if !waitReady(second, first, 10*time.Second) {
		t.Fatal("no settled leader")
	}
	ids := slotIDs(t, first)
	created := func(p *provider, id string) meta.Metadata {
		t.Helper()
		if err := p.create(t.Context(), id); err != nil {
			t.Fatalf("Create %s: %v", id, err)
		}
		if m := waitState(t, p, id, 3*time.Minute, stable); m.GetState() != pb.MachineState_MACHINE_STATE_IDLE {
			t.Fatalf("%s ended %v (%s)", id, m.GetState(), m.GetLastError())
		}
		return virshMeta(t, uri, domainOf(t, uri, id))
	}
	term1 := leaseTerm(t, k, lease)
	if md := created(first, ids[0]); md.Term != term1 {
		t.Fatalf("the first leader defined %s with term %+v; the Lease says %+v", ids[0], md.Term, term1)
	}

	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	if got, _ := waitLeader(t, 2*realTiming.bound(), second); got != second {
		t.Fatal("the standby did not take over")
	}
	term2 := leaseTerm(t, k, lease)
	if term2.Lease != term1.Lease || term2.N != term1.N+1 {
		t.Fatalf("term after the failover %+v, want %+v's next", term2, term1)
	}
	md := created(second, ids[1])
	if md.Term != term2 {
		t.Fatalf("the new leader defined %s with term %+v, want %+v", ids[1], md.Term, term2)
	}
	t.Logf("terms: first leader %d, after the failover %d (Lease %s)", term1.N, term2.N, term1.Lease)
	whole, _ := os.ReadFile(second.logFile)
	for _, l := range strings.Split(string(whole), "\n") {
		if strings.Contains(l, `msg="leader: acting"`) {
			t.Logf("TIMING takeover, from leading to acting (term read, engine start, first listing): %s", l[strings.Index(l, "took="):])
		}
	}

	// A newer term of the same Lease on the domain: the leader must not
	// touch it, and steps down.
	dom := domainOf(t, uri, ids[1])
	md.Term.N = term2.N + 1
	virshSetMeta(t, uri, dom, md)
	var ack pb.TransitionAck
	if err := second.conn.Invoke(t.Context(), method+"Delete", &pb.DeleteRequest{MachineId: ids[1]}, &ack); err != nil {
		t.Logf("Delete: %v", err) // refused (the leader may have stepped down already) or accepted
	}
	select {
	case <-second.done:
	case <-time.After(time.Minute):
		t.Fatalf("the leader did not step down on a newer term:\n%s", second.tail())
	}
	log := second.tail()
	if second.exitErr == nil || !strings.Contains(log, "another replica leads; stopped acting") {
		t.Fatalf("exit %v; want non-zero naming the newer term:\n%s", second.exitErr, log)
	}
	if got := virshMeta(t, uri, dom); got.Term.N != term2.N+1 || got.Delete.Begun() {
		t.Fatalf("the domain was changed by the replaced leader: %+v", got)
	}
	if out, err := exec.Command("virsh", "-c", uri, "domstate", dom).CombinedOutput(); err != nil || !strings.Contains(string(out), "running") {
		t.Fatalf("domain %s after the refused Delete: %s %v", dom, out, err)
	}
}
