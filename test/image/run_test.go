//go:build image

package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

const (
	libvirtSocket = "/var/run/libvirt/libvirt-sock"
	// socketGID owns the relay socket and is the chart's
	// libvirt.socket.groupId (unix_sock_group on a real host).
	socketGID   = 61000
	runcRoot    = "/run/bf-image-runc"
	provider    = "it-image"
	serviceName = "bigfleet.v1alpha1.CapacityProvider"
)

// TestImageRunsAsTheChartRunsIt: the image make image built, unpacked by
// umoci and run by runc with the rendered chart's settings, serves
// BigFleet against the real libvirtd: health, reflection, List, and a
// Create -> IDLE -> Delete of a real domain.
func TestImageRunsAsTheChartRunsIt(t *testing.T) {
	e := loadEnv(t)
	img := readImage(t, imageOut(t))
	relay := startRelay(t, libvirtSocket, socketGID)
	grpcPort, metricsPort := freePort(t), freePort(t)

	var vals chartValues
	vals.Provider = provider
	vals.Replicas, vals.LeaderElection.Enabled = 1, false
	vals.Libvirt.Mode = "socket"
	vals.Libvirt.Hosts = []map[string]string{{"zone": "local"}}
	vals.Libvirt.Socket.Path, vals.Libvirt.Socket.GroupID = relay.path, socketGID
	vals.Storage.Image, vals.Storage.Pool, vals.Network = e.Image, e.Pool, e.Network
	vals.Kernel.Path, vals.Kernel.Initrd, vals.Kernel.Cmdline = e.Kernel, e.Initrd, e.Cmdline
	vals.DomainType, vals.ReconcileInterval, vals.Capacity.SeedCount = e.DomainType, "2s", 2
	vals.GRPC.Port, vals.Metrics.Port = grpcPort, metricsPort
	r := renderChart(t, vals)
	c := r.Deployment.Spec.Template.Spec.Containers[0]
	if c.Image != img.result.Reference {
		t.Errorf("the chart runs %q, make image built %q", c.Image, img.result.Reference)
	}

	bundle := unpack(t, img)
	spec := containerSpec(t, r, img, filepath.Join(bundle, "rootfs"))
	writeSpec(t, filepath.Join(bundle, "config.json"), spec)
	ctr := startContainer(t, bundle)
	t.Logf("runc container %s, pid %d, uid %d, gids %v, seccomp rules %d, network: the host's",
		ctr.id, ctr.pid, spec.Process.User.UID, spec.Process.User.AdditionalGids, len(spec.Linux.Seccomp.Syscalls))

	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	metrics := fmt.Sprintf("http://127.0.0.1:%d", metricsPort)
	waitUntil(t, ctx, "/readyz", func() bool { return httpOK(metrics+"/readyz") && ctr.running(t) })
	if !httpOK(metrics + "/healthz") {
		t.Fatal("/healthz not OK while /readyz is")
	}
	ctr.checkConfinement(t, spec)

	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	checkReflection(t, ctx, conn)

	call := func(method string, req, res proto.Message) error {
		return conn.Invoke(ctx, "/"+serviceName+"/"+method, req, res)
	}
	var list pb.MachineList
	if err := call("List", &pb.ListFilter{States: []pb.MachineState{pb.MachineState_MACHINE_STATE_SPECULATIVE}}, &list); err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list.GetMachines()) == 0 {
		t.Fatal("List: no speculative slot")
	}
	id := list.GetMachines()[0].GetId()
	var ack pb.TransitionAck
	t0 := time.Now()
	if err := call("Create", &pb.CreateRequest{MachineId: id}, &ack); err != nil {
		t.Fatalf("Create: %v", err)
	}
	m := await(t, ctx, call, id, pb.MachineState_MACHINE_STATE_IDLE, ctr)
	domain := strings.TrimPrefix(m.GetHost().GetRef(), "local/")
	t.Cleanup(func() { removeDomain(e, domain) })
	t.Logf("Create -> IDLE in %s: domain %s", time.Since(t0).Round(time.Millisecond), domain)
	if !strings.HasPrefix(domain, "bf-"+provider+"-") || !strings.Contains(virsh(t, e, "list", "--name"), domain) {
		t.Fatalf("domain %q is not running on libvirtd", domain)
	}
	t0 = time.Now()
	if err := call("Delete", &pb.DeleteRequest{MachineId: id}, &ack); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	await(t, ctx, call, id, pb.MachineState_MACHINE_STATE_SPECULATIVE, ctr)
	t.Logf("Delete -> SPECULATIVE in %s", time.Since(t0).Round(time.Millisecond))
	if strings.Contains(virsh(t, e, "list", "--all", "--name"), domain) {
		t.Fatalf("Delete left domain %s", domain)
	}
	if relay.conns.Load() == 0 {
		t.Fatal("the container never used the libvirt socket")
	}
	if !ctr.running(t) {
		t.Fatalf("the container exited:\n%s", ctr.logs())
	}
}

// checkReflection lists the services over gRPC server reflection.
func checkReflection(t *testing.T, ctx context.Context, conn *grpc.ClientConn) {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range res.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), serviceName) {
		t.Fatalf("reflection lists %v, not %s", names, serviceName)
	}
}

func await(t *testing.T, ctx context.Context, call func(string, proto.Message, proto.Message) error,
	id string, want pb.MachineState, ctr *container_) *pb.Machine {
	t.Helper()
	for {
		var m pb.Machine
		if err := call("Get", &pb.MachineRef{Id: id}, &m); err != nil {
			t.Fatalf("Get %s: %v", id, err)
		}
		switch m.GetState() {
		case want:
			return &m
		case pb.MachineState_MACHINE_STATE_FAILED:
			t.Fatalf("%s FAILED waiting for %s: %s\n%s", id, want, m.GetLastError(), ctr.logs())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s stuck in %s waiting for %s\n%s", id, m.GetState(), want, ctr.logs())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// unpack is `umoci unpack` of the image make image tagged.
func unpack(t *testing.T, img ociImage) string {
	t.Helper()
	bundle := filepath.Join(t.TempDir(), "bundle")
	tag := img.index.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
	run(t, "umoci", "unpack", "--image", img.dir+":"+tag, bundle)
	return bundle
}

// container_ is a runc container of the test.
type container_ struct {
	id, bundle string
	pid        int
	log        string
}

func startContainer(t *testing.T, bundle string) *container_ {
	t.Helper()
	c := &container_{id: fmt.Sprintf("bf-image-%d", os.Getpid()), bundle: bundle, log: filepath.Join(bundle, "container.log")}
	logf, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("runc", "--root", runcRoot, "run", "--detach", "--bundle", bundle,
		"--pid-file", filepath.Join(bundle, "pid"), c.id)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		t.Fatalf("runc run: %v\n%s", err, c.logs())
	}
	t.Cleanup(func() {
		_ = exec.Command("runc", "--root", runcRoot, "kill", c.id, "TERM").Run()
		for i := 0; i < 100 && c.running(t); i++ {
			time.Sleep(100 * time.Millisecond)
		}
		_ = exec.Command("runc", "--root", runcRoot, "delete", "--force", c.id).Run()
		if t.Failed() {
			t.Logf("container output:\n%s", c.logs())
		}
	})
	b, err := os.ReadFile(filepath.Join(bundle, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	if c.pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *container_) running(t *testing.T) bool {
	return syscall.Kill(c.pid, 0) == nil && !strings.Contains(readFile(fmt.Sprintf("/proc/%d/stat", c.pid)), ") Z ")
}

func (c *container_) logs() string { return readFile(c.log) }

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// checkConfinement: the running process has the chart's identity and
// limits (uid, groups, no capabilities, no_new_privs, a seccomp filter),
// its root file system refuses writes even from root on the host, /tmp
// takes them, and there is no shell to exec while the binary itself execs.
func (c *container_) checkConfinement(t *testing.T, spec runtimeSpec) {
	t.Helper()
	status := map[string]string{}
	for _, line := range strings.Split(readFile(fmt.Sprintf("/proc/%d/status", c.pid)), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			status[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	uid := strconv.FormatInt(spec.Process.User.UID, 10)
	want := map[string]string{
		"Uid": strings.Repeat(uid+" ", 3) + uid, "CapEff": "0000000000000000", "CapPrm": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
	}
	for k, v := range want {
		if status[k] != v {
			t.Errorf("/proc/%d/status %s: %q, want %q", c.pid, k, status[k], v)
		}
	}
	groups := " " + status["Groups"] + " "
	for _, g := range spec.Process.User.AdditionalGids {
		if !strings.Contains(groups, fmt.Sprintf(" %d ", g)) {
			t.Errorf("process groups %q lack %d", status["Groups"], g)
		}
	}
	root := fmt.Sprintf("/proc/%d/root", c.pid)
	for _, p := range []string{"usr/local/bin/bf-write-test", "etc/bf-write-test"} {
		err := os.WriteFile(filepath.Join(root, p), []byte("x"), 0o644)
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("writing /%s in the container's root: %v, want EROFS (read-only root)", p, err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "tmp", "bf-write-test"), []byte("x"), 0o644); err != nil {
		t.Errorf("/tmp (the chart's emptyDir) is not writable: %v", err)
	}
	for _, sh := range []string{"/bin/sh", "/bin/bash", "/usr/bin/sh", "/bin/busybox"} {
		out, err := exec.Command("runc", "--root", runcRoot, "exec", c.id, sh, "-c", "id").CombinedOutput()
		if err == nil {
			t.Errorf("runc exec %s ran: %s", sh, out)
		}
	}
	out, err := exec.Command("runc", "--root", runcRoot, "exec", c.id, "/usr/local/bin/libvirt", "--help").CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("Usage")) {
		t.Errorf("runc exec of the binary itself failed, so the shell checks prove nothing: %v\n%s", err, out)
	}
}

func httpOK(url string) bool {
	cl := http.Client{Timeout: 2 * time.Second}
	res, err := cl.Get(url)
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func virsh(t *testing.T, e libvirtEnv, args ...string) string {
	t.Helper()
	return run(t, "virsh", append([]string{"-q", "-c", e.URI}, args...)...)
}

// removeDomain removes a test domain and its volumes, whatever state the
// test left them in (only bf-<provider>- names).
func removeDomain(e libvirtEnv, domain string) {
	if !strings.HasPrefix(domain, "bf-"+provider+"-") {
		return
	}
	v := func(args ...string) { _ = exec.Command("virsh", append([]string{"-q", "-c", e.URI}, args...)...).Run() }
	v("destroy", domain)
	v("undefine", domain, "--nvram")
	out, _ := exec.Command("virsh", "-q", "-c", e.URI, "vol-list", e.Pool).Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], domain) {
			v("vol-delete", "--pool", e.Pool, f[0])
		}
	}
}
