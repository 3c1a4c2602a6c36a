//go:build integration

package integration

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// TestCrashedGuests (issue 15 case 4): behind the provider's back, the
// IDLE machine's domain is destroyed (virsh destroy) and the CONFIGURED
// one's QEMU is killed with SIGKILL (shut off (crashed)). Within a few
// reconcile periods (2 s here) the IDLE one runs again; the CONFIGURED one
// stays CONFIGURED and stopped, with last_error naming the domain, its
// state and since when, one WARN line, and the metrics saying so.
func TestCrashedGuests(t *testing.T) {
	e := loadEnv(t)
	const name = "it-crash"
	sweepAtEnd(t, e, name)
	p := startProvider(t, e, provCfg{Name: name, Slots: 2, Metrics: true})
	ids := p.ids(t)
	idle, conf := ids[0], ids[1]
	for _, id := range ids {
		p.accept(t, "Create", &pb.CreateRequest{MachineId: id})
	}
	for _, id := range ids {
		p.awaitOneOf(t, id, 3*time.Minute, stIdle)
	}
	p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: conf, ClusterId: "c-crash", BootstrapBlob: []byte("crash-blob")})
	p.awaitOneOf(t, conf, 3*time.Minute, stConfigured)
	idleDom, confDom := meta.DomainName(name, idle), meta.DomainName(name, conf)

	virsh(t, e, "destroy", idleDom)
	killQEMU(t, confDom)
	t0 := time.Now()
	waitUntil(t, 30*time.Second, "virsh to see the killed guest crashed", func() bool {
		return domState(t, e, confDom) == "shut off (crashed)"
	})
	waitUntil(t, 30*time.Second, "the IDLE machine's domain to run again", func() bool {
		return domState(t, e, idleDom) == "running (booted)"
	})
	t.Logf("TIMING destroyed IDLE domain running again %s later", time.Since(t0).Round(time.Millisecond))
	waitUntil(t, 30*time.Second, "the CONFIGURED machine's report", func() bool {
		return strings.HasPrefix(p.get(t, conf).GetLastError(), "domain "+confDom+" is shut off (crashed) since ")
	})
	time.Sleep(3 * 2 * time.Second) // three more reconcile periods: nothing may change
	if m := p.get(t, idle); m.GetState() != stIdle || m.GetLastError() != "" {
		t.Errorf("IDLE machine: %s %q", m.GetState(), m.GetLastError())
	}
	m := p.get(t, conf)
	if m.GetState() != stConfigured || m.GetCluster() != "c-crash" || !strings.Contains(m.GetLastError(), "BigFleet decides") {
		t.Errorf("CONFIGURED machine: %s %q %q", m.GetState(), m.GetCluster(), m.GetLastError())
	}
	if st := domState(t, e, confDom); st != "shut off (crashed)" {
		t.Errorf("the CONFIGURED machine's domain was touched: %s", st)
	}
	out := p.out.String()
	if n := logLines(out, "reconcile: domain not running", conf); n != 1 {
		t.Errorf("%d WARN lines for %s, want 1 (once per change)", n, conf)
	}
	if n := logLines(out, "reconcile: restarted a domain that was not running", idle); n != 1 {
		t.Errorf("%d restart lines for %s, want 1", n, idle)
	}
	metrics := p.scrapeMetrics(t)
	for _, want := range []string{
		`machines_not_running{state="shutoff",zone="local"} 1`,
		`machine_restarts_total{from="shutoff",outcome="ok",zone="local"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// A Drain of the crashed CONFIGURED machine fails at once, saying why,
	// instead of waiting out the agent (2 min): its guest cannot run the
	// hook, and it must not go IDLE with the cluster's credentials on disk.
	d0 := time.Now()
	p.accept(t, "Drain", &pb.DrainRequest{MachineId: conf, GracePeriodSeconds: 5})
	m, _ = p.awaitOneOf(t, conf, 20*time.Second, stFailed)
	if !strings.Contains(m.GetLastError(), "is shut off (crashed)") || !strings.Contains(m.GetLastError(), "not running") {
		t.Errorf("Drain of the crashed machine: %q", m.GetLastError())
	}
	t.Logf("TIMING Drain of the crashed CONFIGURED machine FAILED %s after it was accepted", time.Since(d0).Round(time.Millisecond))
	p.release(t, conf)
	p.settle(t, idle)
}

// domState is virsh domstate --reason, e.g. "shut off (crashed)".
func domState(t *testing.T, e env, domain string) string {
	return strings.TrimSpace(virsh(t, e, "domstate", "--reason", domain))
}

// killQEMU SIGKILLs a running domain's QEMU, as the OOM killer would.
func killQEMU(t *testing.T, domain string) {
	t.Helper()
	raw, err := os.ReadFile("/run/libvirt/qemu/" + domain + ".pid")
	if err != nil {
		t.Skipf("QEMU pid of %s: %v", domain, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill QEMU %d: %v", pid, err)
	}
}

// logLines counts the provider's text log lines with msg about machine id.
func logLines(out, msg, id string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `msg="`+msg+`"`) && (strings.Contains(l+" ", " machine="+id+" ") ||
			strings.Contains(l, ` machine="`+id+`"`)) {
			n++
		}
	}
	return n
}
