//go:build integration

package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// The booted-hook contract (docs/image-contract.md) against the real
// libvirtd and the test guest, whose /opt/bigfleet/booted reads the
// bigfleet.boot_delay and bigfleet.boot_fail knobs of its kernel command
// line: IDLE means booted.

// adminMachine reads the admin view of one machine (its boot phase).
func (p *provider) adminMachine(t *testing.T, id string) *adminv1.AdminMachine {
	t.Helper()
	var res adminv1.GetMachineResponse
	if err := p.conn.Invoke(t.Context(), "/libvirtprovider.admin.v1.AdminService/GetMachine",
		&adminv1.GetMachineRequest{Id: id}, &res); err != nil {
		t.Fatalf("admin GetMachine %s: %v", id, err)
	}
	return res.GetMachine()
}

// TestBootedDelayKeepsCreating: a guest whose boot is delayed on purpose
// (bigfleet.boot_delay=20) keeps its Create CREATING, the admin view
// showing "booting" with the hook's reason, until the hook says booted;
// then IDLE, and a Configure right after completes within 5 s.
func TestBootedDelayKeepsCreating(t *testing.T) {
	e := loadEnv(t)
	const name, delay = "it-bootdelay", 20 * time.Second
	sweepAtEnd(t, e, name)
	p := startProvider(t, e, provCfg{Name: name, Slots: 1, Cmdline: e.Cmdline + " bigfleet.boot_delay=20"})
	id := p.ids(t)[0]
	t0 := time.Now()
	p.accept(t, "Create", &pb.CreateRequest{MachineId: id})
	var reason string
	for reason == "" && time.Since(t0) < 3*time.Minute {
		m := p.adminMachine(t, id)
		if st := m.GetMachine().GetState(); st != pb.MachineState_MACHINE_STATE_CREATING {
			t.Fatalf("%s is %s %s after %s, before the boot delay's end (last_error %q)", id, st, m.GetBootPhase(),
				time.Since(t0).Round(time.Millisecond), m.GetMachine().GetLastError())
		}
		if strings.Contains(m.GetBootReason(), "bigfleet.boot_delay") && m.GetBootPhase() == "booting" {
			reason = m.GetBootReason()
		}
		time.Sleep(100 * time.Millisecond)
	}
	if reason == "" {
		t.Fatal("the admin view never showed the hook's reason while booting")
	}
	t.Logf("admin view while booting: booting: %s", reason)
	m, seen := p.awaitOneOf(t, id, 4*time.Minute, stIdle)
	took := time.Since(t0)
	t.Logf("TIMING Create → IDLE with boot_delay=20: %s (states %v)", took.Round(time.Millisecond), seen)
	if took < delay {
		t.Fatalf("IDLE after %s, before the %s boot delay", took, delay)
	}
	if am := p.adminMachine(t, id); am.GetBootPhase() != "" {
		t.Errorf("IDLE machine still shows boot phase %q (%s)", am.GetBootPhase(), am.GetBootReason())
	}
	if m.GetLastError() != "" {
		t.Errorf("last_error %q", m.GetLastError())
	}
	if !logLine(p, "guest booted", "via=hook") {
		t.Error("no INFO line saying the guest booted (via the hook)")
	}

	t1 := time.Now()
	p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-booted", BootstrapBlob: []byte("blob")})
	p.awaitOneOf(t, id, time.Minute, stConfigured)
	cfg := time.Since(t1)
	t.Logf("TIMING Configure on a booted IDLE machine → CONFIGURED: %s", cfg.Round(time.Millisecond))
	if cfg > 5*time.Second {
		t.Errorf("Configure right after IDLE took %s, want ≤ 5s", cfg)
	}
}

// TestBootedFailNamesUnit: a guest whose hook says its boot failed ends
// the Create FAILED naming the unit, with a WARN line; the operator's
// Release removes it.
func TestBootedFailNamesUnit(t *testing.T) {
	e := loadEnv(t)
	const name = "it-bootfail"
	sweepAtEnd(t, e, name)
	p := startProvider(t, e, provCfg{Name: name, Slots: 1, Cmdline: e.Cmdline + " bigfleet.boot_fail=kubelet-prep.service"})
	id := p.ids(t)[0]
	t0 := time.Now()
	p.accept(t, "Create", &pb.CreateRequest{MachineId: id})
	m, _ := p.awaitOneOf(t, id, 4*time.Minute, stFailed)
	t.Logf("TIMING Create → FAILED (boot_fail): %s", time.Since(t0).Round(time.Millisecond))
	if want := "boot failed: unit kubelet-prep.service failed"; !strings.Contains(m.GetLastError(), want) {
		t.Fatalf("last_error %q, want it to contain %q", m.GetLastError(), want)
	}
	if !logLine(p, "WARN", "guest did not boot", "kubelet-prep.service") {
		t.Error("no WARN line naming the failed unit")
	}
	p.release(t, id)
}

// TestBootedRestartedGuest: an IDLE machine whose guest reconcile started
// again (virsh destroy behind the provider's back) stays IDLE on
// BigFleet's wire while the admin view shows it booting, with the hook's
// reason; a Configure sent then waits for the boot within its deadline
// and completes.
func TestBootedRestartedGuest(t *testing.T) {
	e := loadEnv(t)
	const name = "it-bootrestart"
	sweepAtEnd(t, e, name)
	p := startProvider(t, e, provCfg{Name: name, Slots: 1, Cmdline: e.Cmdline + " bigfleet.boot_delay=20"})
	id := p.ids(t)[0]
	p.accept(t, "Create", &pb.CreateRequest{MachineId: id})
	p.awaitOneOf(t, id, 4*time.Minute, stIdle)

	virsh(t, e, "destroy", meta.DomainName(name, id))
	t0 := time.Now()
	var am *adminv1.AdminMachine
	waitUntil(t, 2*time.Minute, "the restarted guest to show booting", func() bool {
		am = p.adminMachine(t, id)
		return am.GetBootPhase() == "booting"
	})
	if st := am.GetMachine().GetState(); st != stIdle {
		t.Fatalf("a booting restarted machine is %s on the wire, want IDLE", st)
	}
	t.Logf("restarted guest after %s: IDLE, %s: %s", time.Since(t0).Round(time.Millisecond), am.GetBootPhase(), am.GetBootReason())

	t1 := time.Now()
	p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-restart", BootstrapBlob: []byte("blob")})
	p.awaitOneOf(t, id, 3*time.Minute, stConfigured)
	t.Logf("TIMING Configure on a booting IDLE machine → CONFIGURED: %s", time.Since(t1).Round(time.Millisecond))
	if !logLine(p, "guest booted", "during=configure", "via=hook") {
		t.Error("no line saying the Configure waited for the boot")
	}
	if am := p.adminMachine(t, id); am.GetBootPhase() != "" {
		t.Errorf("CONFIGURED machine still shows boot phase %q", am.GetBootPhase())
	}
}

// TestBootedNoAgentFailsCreate: a guest whose agent never answers
// (bigfleet.noagent=1) ends its Create FAILED with the cause, a little
// before --create-timeout, not IDLE.
func TestBootedNoAgentFailsCreate(t *testing.T) {
	e := loadEnv(t)
	const name, timeout = "it-bootnoagent", 40 * time.Second
	sweepAtEnd(t, e, name)
	p := startProvider(t, e, provCfg{Name: name, Slots: 1, Cmdline: e.Cmdline + " bigfleet.noagent=1",
		Args: []string{"--create-timeout=" + timeout.String()}})
	id := p.ids(t)[0]
	t0 := time.Now()
	p.accept(t, "Create", &pb.CreateRequest{MachineId: id})
	m, _ := p.awaitOneOf(t, id, timeout+30*time.Second, stFailed)
	took := time.Since(t0)
	t.Logf("TIMING Create → FAILED (no agent): %s: %q", took.Round(time.Millisecond), m.GetLastError())
	if !strings.Contains(m.GetLastError(), "create: guest agent did not answer within ") {
		t.Fatalf("last_error %q, want the agent named (not only a timeout)", m.GetLastError())
	}
	if !logLine(p, "WARN", "guest did not boot", "did not answer") {
		t.Error("no WARN line")
	}
	p.release(t, id)
}
