//go:build integration

package integration

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// TestBinaryOverGRPC runs the real bin/libvirt against the real libvirtd
// and drives it as BigFleet does, with a grpc-go client: Create → IDLE,
// Configure → CONFIGURED, Drain → IDLE, Delete → SPECULATIVE with the
// domain gone; a slot in a zone whose host is down is refused Unavailable;
// a VM removed behind the provider's back turns FAILED on reconcile.
func TestBinaryOverGRPC(t *testing.T) {
	e := loadEnv(t)
	p := startBinary(t, e)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()

	local, dead := p.slot(t, "local"), p.slot(t, "dead")
	var ack pb.TransitionAck
	err := p.call(ctx, "Create", &pb.CreateRequest{MachineId: dead.Id}, &ack)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Create in the dead zone: %v, want Unavailable", err)
	}

	id := local.Id
	m := p.transition(t, ctx, "Create", &pb.CreateRequest{MachineId: id}, pb.MachineState_MACHINE_STATE_IDLE)
	domain := strings.TrimPrefix(m.GetHost().GetRef(), "local/")
	if m.GetHost().GetProvider() != "it-bin" || !strings.HasPrefix(domain, "bf-it-bin-") {
		t.Fatalf("host %+v", m.GetHost())
	}
	t.Cleanup(func() { cleanupDomain(t, e, domain) })
	if !strings.Contains(virsh(t, e, "list", "--name"), domain) {
		t.Fatalf("domain %s not running", domain)
	}
	blob := bytes.Repeat([]byte{0, 'x', 0xfe}, 1000)
	meta := map[string]string{"k": "v\x00w"}
	m = p.transition(t, ctx, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-bin",
		BootstrapBlob: blob, ShardMetadata: meta}, pb.MachineState_MACHINE_STATE_CONFIGURED)
	if m.GetCluster() != "c-bin" || m.GetShardMetadata()["k"] != meta["k"] {
		t.Fatalf("configured machine %+v", m)
	}
	p.transition(t, ctx, "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: 2}, pb.MachineState_MACHINE_STATE_IDLE)
	p.transition(t, ctx, "Delete", &pb.DeleteRequest{MachineId: id}, pb.MachineState_MACHINE_STATE_SPECULATIVE)
	if strings.Contains(virsh(t, e, "list", "--all", "--name"), domain) ||
		strings.Contains(virsh(t, e, "vol-list", e.Pool), domain) {
		t.Fatal("Delete left the domain or its volume")
	}

	// Removed behind the provider's back: reconcile marks it FAILED.
	// Undefined first (it turns transient), then destroyed (it is gone): a
	// defined domain seen shut off in between would be started again by
	// reconcile, as an IDLE machine's stopped domain is.
	p.transition(t, ctx, "Create", &pb.CreateRequest{MachineId: id}, pb.MachineState_MACHINE_STATE_IDLE)
	virsh(t, e, "undefine", domain)
	virsh(t, e, "destroy", domain)
	m = p.await(t, ctx, id, pb.MachineState_MACHINE_STATE_FAILED)
	if !strings.Contains(m.GetLastError(), "vanished") {
		t.Fatalf("last_error %q", m.GetLastError())
	}
}

type binProc struct {
	cmd  *exec.Cmd
	conn *grpc.ClientConn
	logs *bytes.Buffer
}

func startBinary(t *testing.T, e env) *binProc {
	t.Helper()
	return serveBinary(t, providerBinary(t), func(addr string) []string {
		return []string{"--addr=" + addr, "--metrics-addr=", "--provider=it-bin",
			"--connect=local=" + e.URI + ",dead=qemu+unix:///system?socket=/nonexistent/libvirt-sock",
			"--image=" + e.Image, "--storage-pool=" + e.Pool, "--network=" + e.Network,
			"--kernel=" + e.Kernel, "--initrd=" + e.Initrd, "--cmdline=" + e.Cmdline,
			"--seed-count=4", "--reconcile-interval=1s", "--log-format=text", "--domain-type=" + e.DomainType, callTimeoutArg}
	})
}

// serveBinary starts bin with the flags args gives for a free loopback
// address, dials it, and waits until it serves List and its host "local"
// is connected; the process gets SIGTERM (then SIGKILL) at cleanup, and
// its output is logged if the test failed.
func serveBinary(t *testing.T, bin string, args func(addr string) []string) *binProc {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logs := &bytes.Buffer{}
	cmd := exec.Command(bin, args(addr)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p := &binProc{cmd: cmd, conn: conn, logs: logs}
	t.Cleanup(func() {
		conn.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("bin/libvirt output:\n%s", logs)
		}
	})
	waitUntil(t, 60*time.Second, "bin/libvirt to serve", func() bool {
		var l pb.MachineList
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		return p.call(ctx, "List", &pb.ListFilter{}, &l) == nil
	})
	p.awaitHostConnected(t, "local")
	return p
}

func (p *binProc) call(ctx context.Context, method string, req, res proto.Message) error {
	return p.conn.Invoke(ctx, "/bigfleet.v1alpha1.CapacityProvider/"+method, req, res)
}

// slot finds a SPECULATIVE machine in zone.
func (p *binProc) slot(t *testing.T, zone string) *pb.Machine {
	t.Helper()
	var l pb.MachineList
	if err := p.call(t.Context(), "List", &pb.ListFilter{States: []pb.MachineState{pb.MachineState_MACHINE_STATE_SPECULATIVE}}, &l); err != nil {
		t.Fatal(err)
	}
	for _, m := range l.GetMachines() {
		if m.GetZone() == zone {
			return m
		}
	}
	t.Fatalf("no speculative slot in zone %q (have %d)", zone, len(l.GetMachines()))
	return nil
}

// transition sends a mutation and polls Get until want (or FAILED).
func (p *binProc) transition(t *testing.T, ctx context.Context, method string, req proto.Message, want pb.MachineState) *pb.Machine {
	t.Helper()
	var ack pb.TransitionAck
	t0 := time.Now()
	if err := p.call(ctx, method, req, &ack); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	m := p.await(t, ctx, ack.GetMachine().GetId(), want)
	t.Logf("TIMING %s over gRPC → %s: %s", method, want, time.Since(t0).Round(time.Millisecond))
	return m
}

func (p *binProc) await(t *testing.T, ctx context.Context, id string, want pb.MachineState) *pb.Machine {
	t.Helper()
	for {
		var m pb.Machine
		if err := p.call(ctx, "Get", &pb.MachineRef{Id: id}, &m); err != nil {
			t.Fatalf("Get %s: %v", id, err)
		}
		domain := strings.TrimPrefix(m.GetHost().GetRef(), "local/")
		switch m.GetState() {
		case want:
			return &m
		case pb.MachineState_MACHINE_STATE_FAILED:
			t.Fatalf("%s FAILED while waiting for %s: last_error %q%s", id, want, m.GetLastError(), qemuLogTail(domain))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s stuck in %s waiting for %s%s", id, m.GetState(), want, qemuLogTail(domain))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// cleanupDomain removes a test domain and its volumes whatever state the
// test left them in (never the golden image: only bf-* names).
func cleanupDomain(t *testing.T, e env, domain string) {
	if !strings.HasPrefix(domain, "bf-") {
		return
	}
	if strings.Contains(virsh(t, e, "list", "--all", "--name"), domain) {
		virsh(t, e, "destroy", domain)
		virsh(t, e, "undefine", domain, "--nvram")
	}
	for _, v := range []string{domain + ".qcow2", domain + "-seed.iso"} {
		if strings.Contains(virsh(t, e, "vol-list", e.Pool), v) {
			virsh(t, e, "vol-delete", "--pool", e.Pool, v)
		}
	}
}
