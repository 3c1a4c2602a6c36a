//go:build integration && lab

package integration

import (
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// labFacts is what each lab host is (scripts/lab.sh: hosts alternate
// bookworm tls, trixie libssh, trixie tls, bookworm libssh).
var labFacts = map[string]struct{ transport, libvirt string }{
	"lab1": {"tls", "9.0"},
	"lab2": {"libssh", "11.3"},
	"lab3": {"tls", "11.3"},
	"lab4": {"libssh", "9.0"},
}

// TestLabLifecycle (check 1) drives one machine per lab host through
// Create → Configure (a cluster id and a 256 KiB random blob) → Drain →
// Delete, over that host's own transport (qemu+tls or qemu+libssh) and
// libvirt (9.0 or 11.3), and checks each step on the host itself, as root
// inside it: the domain runs there, its metadata carries the binding after
// Configure and not after Drain, the blob reached the guest, and after
// Delete neither the domain nor its volumes are left.
func TestLabLifecycle(t *testing.T) {
	e := loadLab(t)
	hosts := e.labHosts(t, e.Hosts).only("lab1", "lab2", "lab3", "lab4")
	p := startQuietLab(t, e, "lab-life", hosts)
	for _, h := range hosts.Hosts {
		t.Run(h.Name, func(t *testing.T) {
			t.Parallel()
			labLifecycleOn(t, e, p, h)
		})
	}
}

func labLifecycleOn(t *testing.T, e labEnv, p *labProvider, h labHost) {
	facts := labFacts[h.Name]
	scheme := h.URI[:strings.Index(h.URI, "://")]
	if scheme != "qemu+"+facts.transport {
		t.Fatalf("%s is reached over %s, want qemu+%s", h.Name, scheme, facts.transport)
	}
	hv := p.host(t, h.Name)
	if hv == nil || !hv.GetConnected() {
		t.Fatalf("host %s not connected: %v", h.Name, hv)
	}
	// A host's view is bounded (5 s): a host just connected over a slow
	// transport can answer with its versions unread (last_error says why);
	// they come with a later look.
	for deadline := time.Now().Add(30 * time.Second); hv.GetLibvirtVersion() == "" && time.Now().Before(deadline); {
		t.Logf("host %s: versions not read yet (%s); looking again", h.Name, hv.GetLastError())
		time.Sleep(time.Second)
		hv = p.host(t, h.Name)
	}
	if !strings.HasPrefix(hv.GetLibvirtVersion(), facts.libvirt+".") {
		t.Fatalf("host %s runs libvirt %q, want %s", h.Name, hv.GetLibvirtVersion(), facts.libvirt)
	}

	id := p.slotIn(t, h.Zone)
	// Create → IDLE, the domain running on this host.
	t0 := time.Now()
	p.mutate(t, "Create", &pb.CreateRequest{MachineId: id})
	m := p.await(t, id, 3*time.Minute, pb.MachineState_MACHINE_STATE_IDLE)
	create := time.Since(t0)
	if refHost(m) != h.Name {
		t.Fatalf("machine %s placed on %q (ref %q), want %s", id, refHost(m), m.GetHost().GetRef(), h.Name)
	}
	dom := refDomain(m)
	if !strings.HasPrefix(dom, "bf-lab-life-") {
		t.Fatalf("domain %q is not named for this provider", dom)
	}
	if st := labVirsh(t, e, h.Name, "domstate", dom); st != "running" {
		t.Fatalf("after Create, %s on %s is %q, want running", dom, h.Name, st)
	}
	if vols := labVirsh(t, e, h.Name, "vol-list", "bigfleet"); !strings.Contains(vols, dom) {
		t.Fatalf("after Create, no volume of %s in %s's pool:\n%s", dom, h.Name, vols)
	}
	meta := labMeta(t, e, h.Name, dom)
	if !strings.Contains(meta, id) || strings.Contains(meta, "<cluster") {
		t.Fatalf("after Create, %s's metadata on %s should name machine %s and hold no binding:\n%s", dom, h.Name, id, meta)
	}

	// Configure → CONFIGURED: the binding in the domain's metadata, the blob in the guest.
	blob := make([]byte, 256<<10)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	cluster := "c-lab-life-" + h.Name
	t0 = time.Now()
	p.mutate(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: cluster, BootstrapBlob: blob})
	m = p.await(t, id, 4*time.Minute, pb.MachineState_MACHINE_STATE_CONFIGURED)
	configure := time.Since(t0)
	if m.GetCluster() != cluster || m.GetLastError() != "" {
		t.Fatalf("configured machine: cluster %q last_error %q, want cluster %q and no error", m.GetCluster(), m.GetLastError(), cluster)
	}
	if meta := labMeta(t, e, h.Name, dom); !strings.Contains(meta, ">"+cluster+"<") {
		t.Fatalf("after Configure, %s's metadata on %s has no binding to %s:\n%s", dom, h.Name, cluster, meta)
	}
	if got := labAgentCat(t, e, h.Name, dom, "/run/bigfleet/blob.sha256"); got != sha(blob) {
		t.Fatalf("blob sha256 in the guest on %s: %q, want %s", h.Name, got, sha(blob))
	}
	if st := labVirsh(t, e, h.Name, "domstate", dom); st != "running" {
		t.Fatalf("after Configure, %s on %s is %q", dom, h.Name, st)
	}

	// Drain → IDLE: the binding cleared, the domain still running.
	t0 = time.Now()
	p.mutate(t, "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: 2})
	m = p.await(t, id, 3*time.Minute, pb.MachineState_MACHINE_STATE_IDLE)
	drain := time.Since(t0)
	if m.GetCluster() != "" || m.GetLastError() != "" {
		t.Fatalf("drained machine: cluster %q last_error %q", m.GetCluster(), m.GetLastError())
	}
	if meta := labMeta(t, e, h.Name, dom); strings.Contains(meta, cluster) {
		t.Fatalf("after Drain, %s's metadata on %s still binds it:\n%s", dom, h.Name, meta)
	}
	if st := labVirsh(t, e, h.Name, "domstate", dom); st != "running" {
		t.Fatalf("after Drain, %s on %s is %q", dom, h.Name, st)
	}

	// Delete → SPECULATIVE: nothing of the machine left on the host.
	t0 = time.Now()
	p.mutate(t, "Delete", &pb.DeleteRequest{MachineId: id})
	m = p.await(t, id, 3*time.Minute, pb.MachineState_MACHINE_STATE_SPECULATIVE)
	del := time.Since(t0)
	if m.GetLastError() != "" {
		t.Fatalf("deleted machine: last_error %q", m.GetLastError())
	}
	if doms := labVirsh(t, e, h.Name, "list", "--all", "--name"); strings.Contains(doms, dom) {
		t.Fatalf("after Delete, %s is still defined on %s:\n%s", dom, h.Name, doms)
	}
	if vols := labVirsh(t, e, h.Name, "vol-list", "bigfleet"); strings.Contains(vols, dom) {
		t.Fatalf("after Delete, volumes of %s left in %s's pool:\n%s", dom, h.Name, vols)
	}
	t.Logf("TIMING %s %s %s create=%s configure=%s drain=%s delete=%s", h.Name, facts.transport, facts.libvirt,
		create.Round(time.Millisecond), configure.Round(time.Millisecond), drain.Round(time.Millisecond), del.Round(time.Millisecond))
}

// labMeta is our metadata element of a domain, read by virsh inside the host.
func labMeta(t *testing.T, e labEnv, host, dom string) string {
	t.Helper()
	return labVirsh(t, e, host, "metadata", dom, "--uri", meta.NS)
}
