//go:build soak

package soak

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// The soak's own judgement is tested first, without libvirt: a soak that
// could not tell a provoked failure from a false one would prove nothing.

func TestProfiles(t *testing.T) {
	// The profiles' own values: not those of a by-hand run's overrides.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SOAK_") {
			t.Setenv(k, "")
		}
	}
	t.Setenv("SOAK_PROFILE", "short")
	p, err := loadParams()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []faultKind{provKill, provTerm, virtKill, virtFreeze, agentFault} {
		if p.Faults[k] < 10 {
			t.Errorf("short profile: %d %s faults, CI needs at least 10 of each kind", p.Faults[k], k)
		}
	}
	if p.Faults[lostState] < 1 || p.Freeze[0] < 10*time.Second || p.Freeze[1] > 30*time.Second {
		t.Errorf("short profile: lost-state %d, freeze %v", p.Faults[lostState], p.Freeze)
	}
	t.Setenv("SOAK_PROFILE", "long")
	t.Setenv("SOAK_LIBVIRTD_FREEZES", "3")
	t.Setenv("SOAK_FREEZE", "11s-12s")
	t.Setenv("SOAK_SEED", "42")
	if p, err = loadParams(); err != nil {
		t.Fatal(err)
	}
	if p.Faults[provKill] != 100 || p.Faults[virtKill] != 20 || p.Faults[virtFreeze] != 3 ||
		p.Freeze != [2]time.Duration{11 * time.Second, 12 * time.Second} || p.Seed != 42 {
		t.Errorf("long profile with overrides: %s", p)
	}
	for env, bad := range map[string]string{"SOAK_FREEZE": "30s-10s", "SOAK_CLIENTS": "-1", "SOAK_PROFILE": "medium"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, bad)
			if _, err := loadParams(); err == nil {
				t.Errorf("%s=%s accepted", env, bad)
			}
		})
	}
}

func TestJudgement(t *testing.T) {
	s := &soak{led: newLedger(), aimer: newAimer(), t0: time.Now(), pr: &provider{Proc: &soakkit.Proc{LogPath: "/nonexistent"}}, quiet: true}
	s.h = &host{log: s.logf}
	now := time.Now()
	op := &opRecord{Kind: "Configure", Machine: "m", Sent: now.Add(-time.Minute)}
	failed := func(le string) *pb.Machine {
		return &pb.Machine{Id: "m", State: pb.MachineState_MACHINE_STATE_FAILED, LastError: le}
	}
	const interrupted = "configure failed: interrupted by a provider restart; its bootstrap hook had exited with status 2"
	const oldCause = "configure failed: interrupted by a provider restart; the bootstrap blob is never persisted, so it cannot be delivered again"

	s.led.SetSent("m", binding{Cluster: "exit3"})
	if why := s.explain(op, failed("configure failed: bootstrap hook exited with status 3: bootstrap failed on purpose")); why == "" {
		t.Error("the exit3 hook's failure was not recognised as provoked")
	}
	s.led.SetSent("m", binding{Cluster: "c1"})
	if why := s.explain(op, failed("configure failed: bootstrap hook exited with status 3")); why != "" {
		t.Errorf("status 3 on a normal cluster explained as %q", why)
	}
	if why := s.explain(op, failed(interrupted)); why != "" {
		t.Errorf("interrupted with no fault explained as %q", why)
	}
	s.led.AddFault(&faultEvent{Kind: provTerm, Start: now.Add(-30 * time.Second), End: now.Add(-29 * time.Second)})
	if why := s.explain(op, failed(interrupted)); why != "" {
		t.Errorf("a SIGTERM that exited within --shutdown-timeout explained the interruption as %q", why)
	}
	kill := s.led.BeginFault(provKill, "") // judged while the restart is still under way
	if why := s.explain(op, failed(interrupted)); why == "" {
		t.Error("a SIGKILL mid-Configure (injection under way) did not explain the interruption")
	}
	s.led.EditFault(kill, func(f *faultEvent) { f.End = time.Now() })
	if why := s.explain(op, failed(interrupted)); why == "" {
		t.Error("a SIGKILL mid-Configure did not explain the interruption")
	}
	if why := s.explain(op, failed(oldCause)); why != "" {
		t.Errorf("the old blanket cause of a cut Configure explained as %q: the guest tells now", why)
	}
	if why := s.explain(&opRecord{Kind: "Create", Sent: op.Sent}, failed("create failed: connection reset")); why != "" {
		t.Errorf("a Create failure explained as %q", why)
	}

	if !s.led.Violate(clFalse, "k", "x") || s.led.Violate(clFalse, "k", "x") || s.led.Count(clFalse) != 1 {
		t.Error("a lasting violation must count once")
	}
	s.judgeFailed(op, failed("drain failed: boom"))
	s.judgeFailed(nil, failed("drain failed: boom"))
	if n := s.led.Count(clFalse); n != 2 {
		t.Errorf("false_failed=%d after one new false failure judged twice, want 2", n)
	}
}

// TestAdminCredentials: the soak's client certificate may release machines
// (admin writes), against the same binary on the fake backend, so a change
// of the admin API's rules fails here in a second, not mid-soak.
func TestAdminCredentials(t *testing.T) {
	p, err := loadParams()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.Bin); err != nil {
		t.Skipf("provider binary %s: %v (make build)", p.Bin, err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "libvirt")
	if err := soakkit.CopyFile(p.Bin, bin); err != nil {
		t.Fatal(err)
	}
	flags, creds, err := adminWriteFlags(bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var out bytes.Buffer
	cmd := exec.Command(bin, append([]string{"--addr=" + addr, "--metrics-addr=", "--use-fake-backend", "--seed-count=1"}, flags...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var list pb.MachineList
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = conn.Invoke(ctx, soakkit.MethodPrefix+"List", &pb.ListFilter{}, &list)
		cancel()
		if err == nil && len(list.GetMachines()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider not serving: %v\n%s", err, out.String())
		}
	}
	// A SPECULATIVE machine cannot be released: Aborted proves the write
	// was authorised and reached the engine.
	err = conn.Invoke(t.Context(), "/libvirtprovider.admin.v1.AdminService/ReleaseMachine",
		&adminv1.ReleaseMachineRequest{Id: list.GetMachines()[0].GetId()}, &adminv1.ReleaseMachineResponse{})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("admin Release with the soak's credentials: %v, want Aborted (authorised, refused by state)\n%s", err, out.String())
	}
}
