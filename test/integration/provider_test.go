//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// The helpers below start bin/libvirt with the flags a test needs (a state
// file, a metrics listener, extra flags), restart it on the same state,
// SIGKILL it, capture its output race-free, and sweep whatever domains and
// volumes of its --provider a test leaves behind.

var (
	buildOnce sync.Once
	buildDir  string
	builtBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	if path := envPath(); path != "" {
		e, err := readEnv(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		accel = e
		// The first line of the suite: which accelerator every guest runs on.
		fmt.Printf("accelerator: %s (provider --domain-type=%s)\n", e.Accel, e.DomainType)
	}
	closeInheritedFDs()
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	if pki.dir != "" {
		_ = os.RemoveAll(pki.dir)
	}
	os.Exit(code)
}

// providerBinary builds cmd/libvirt once per test process.
func providerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "bigfleet-it-bin-")
		if buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "libvirt")
		out, err := exec.Command("go", "build", "-o", builtBin, "../../cmd/libvirt").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build bin/libvirt: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// lockedBuffer collects the provider's stdout+stderr; tests read it while
// the process still writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// provCfg is how a test wants bin/libvirt started.
type provCfg struct {
	Name    string   // --provider; domains are bf-<Name>-*
	State   string   // --state ("" keeps state in memory)
	Slots   int      // slots of the tiny instance type in zone local
	Metrics bool     // serve /metrics on a free port
	Cmdline string   // --cmdline ("" = the env's)
	Args    []string // more flags
}

type provider struct {
	*binProc
	cfg         provCfg
	metricsAddr string
	out         *lockedBuffer
	done        chan struct{}
	stopped     bool
}

// tinyType keeps TCG guests light: one vCPU, 256 MiB.
const tinyType = "it.tiny"

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startProvider starts bin/libvirt with cfg and waits until it serves List.
// It is stopped (SIGTERM) at cleanup unless the test stopped or killed it.
func startProvider(t *testing.T, e env, cfg provCfg) *provider {
	t.Helper()
	bin := providerBinary(t)
	dir := t.TempDir()
	types := filepath.Join(dir, "types.json")
	offers := filepath.Join(dir, "offerings.json")
	must(t, os.WriteFile(types, []byte(`[{"name":"`+tinyType+`","vcpu":1,"memory_mib":256}]`), 0o644))
	must(t, os.WriteFile(offers, []byte(fmt.Sprintf(
		`[{"instance_type":%q,"zone":"local","capacity_type":"on_demand","count":%d}]`, tinyType, cfg.Slots)), 0o644))
	addr := freeAddr(t)
	p := &provider{cfg: cfg, out: &lockedBuffer{}, done: make(chan struct{})}
	if cfg.Metrics {
		p.metricsAddr = freeAddr(t)
	}
	cmdline := cfg.Cmdline
	if cmdline == "" {
		cmdline = e.Cmdline
	}
	args := []string{"--addr=" + addr, "--metrics-addr=" + p.metricsAddr, "--provider=" + cfg.Name,
		"--connect=local=" + e.URI, "--image=" + e.Image, "--storage-pool=" + e.Pool, "--network=" + e.Network,
		"--kernel=" + e.Kernel, "--initrd=" + e.Initrd, "--cmdline=" + cmdline,
		"--instance-types=" + types, "--offerings=" + offers, "--state=" + cfg.State,
		"--reconcile-interval=2s", "--log-format=text", "--log-level=debug",
		"--domain-type=" + e.DomainType, callTimeoutArg}
	tlsFlags, creds := adminWriteFlags(t, bin)
	args = append(args, tlsFlags...)
	cmd := exec.Command(bin, append(args, cfg.Args...)...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	p.binProc = &binProc{cmd: cmd, conn: conn}
	t.Cleanup(func() {
		conn.Close()
		p.stop(t)
		if t.Failed() {
			t.Logf("bin/libvirt (%s) output:\n%s", cfg.Name, p.out)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		var l pb.MachineList
		if p.call(t.Context(), "List", &pb.ListFilter{}, &l) == nil {
			break
		}
		select {
		case <-p.done:
			t.Fatalf("bin/libvirt exited at startup:\n%s", p.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("bin/libvirt not serving after 60s:\n%s", p.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.awaitHostConnected(t, "local")
	return p
}

// stop sends SIGTERM and waits (SIGKILL after 30 s).
func (p *provider) stop(t *testing.T) {
	if p.stopped {
		return
	}
	p.stopped = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("bin/libvirt ignored SIGTERM for 30s")
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill SIGKILLs the provider: no shutdown path runs.
func (p *provider) kill(t *testing.T) {
	p.stopped = true
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p.conn.Close()
}

// ids returns the machine ids in stable order.
func (p *provider) ids(t *testing.T) []string {
	t.Helper()
	var l pb.MachineList
	must(t, p.call(t.Context(), "List", &pb.ListFilter{}, &l))
	var ids []string
	for _, m := range l.GetMachines() {
		ids = append(ids, m.GetId())
	}
	slices.Sort(ids)
	if len(ids) != p.cfg.Slots {
		t.Fatalf("%d machines, want %d: %v", len(ids), p.cfg.Slots, ids)
	}
	return ids
}

func (p *provider) get(t testing.TB, id string) *pb.Machine {
	t.Helper()
	var m pb.Machine
	if err := p.call(t.Context(), "Get", &pb.MachineRef{Id: id}, &m); err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return &m
}

// accept sends a mutation and returns its ack (the machine already in the
// transitional state).
func (p *provider) accept(t *testing.T, method string, req proto.Message) *pb.TransitionAck {
	t.Helper()
	var ack pb.TransitionAck
	if err := p.call(t.Context(), method, req, &ack); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return &ack
}

// awaitOneOf polls Get (every 50 ms) until the machine is in one of want,
// and returns it with the distinct states seen on the way. A FAILED machine
// that is not wanted fails the test at once, with its last_error and the
// tail of its QEMU log (waiting on would only hide the cause).
func (p *provider) awaitOneOf(t testing.TB, id string, within time.Duration, want ...pb.MachineState) (*pb.Machine, []pb.MachineState) {
	t.Helper()
	deadline := time.Now().Add(within)
	var seen []pb.MachineState
	for {
		m := p.get(t, id)
		if len(seen) == 0 || seen[len(seen)-1] != m.GetState() {
			seen = append(seen, m.GetState())
		}
		if slices.Contains(want, m.GetState()) {
			return m, seen
		}
		if m.GetState() == stFailed {
			t.Fatalf("%s went FAILED (seen %v) while waiting for %v: last_error %q%s",
				id, seen, want, m.GetLastError(), qemuLogTail(p.domainOf(m)))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still %s after %s (seen %v), want one of %v%s", id, m.GetState(), within, seen, want,
				qemuLogTail(p.domainOf(m)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// release is the operator's way out of FAILED (admin API, --admin-write):
// the VM and its volumes go, the slot returns to SPECULATIVE.
func (p *provider) release(t *testing.T, id string) {
	t.Helper()
	var res adminv1.ReleaseMachineResponse
	if err := p.conn.Invoke(t.Context(), "/libvirtprovider.admin.v1.AdminService/ReleaseMachine",
		&adminv1.ReleaseMachineRequest{Id: id}, &res); err != nil {
		t.Fatalf("release %s: %v", id, err)
	}
	p.awaitOneOf(t, id, 2*time.Minute, pb.MachineState_MACHINE_STATE_SPECULATIVE)
}

// settle returns a machine to SPECULATIVE whatever stable state it is in:
// IDLE → Delete, FAILED → release.
func (p *provider) settle(t *testing.T, id string) {
	t.Helper()
	switch m := p.get(t, id); m.GetState() {
	case pb.MachineState_MACHINE_STATE_IDLE:
		p.accept(t, "Delete", &pb.DeleteRequest{MachineId: id})
		p.awaitOneOf(t, id, 2*time.Minute, pb.MachineState_MACHINE_STATE_SPECULATIVE)
	case pb.MachineState_MACHINE_STATE_FAILED:
		p.release(t, id)
	case pb.MachineState_MACHINE_STATE_SPECULATIVE:
	default:
		t.Fatalf("settle %s: unexpected state %s", id, m.GetState())
	}
}

// scrapeMetrics returns the provider's /metrics text.
func (p *provider) scrapeMetrics(t *testing.T) string {
	t.Helper()
	res, err := http.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", res.StatusCode, err)
	}
	return string(b)
}

// ours lists the domains and volumes of provider name that exist now.
func ours(t *testing.T, e env, name string) (domains, volumes []string) {
	t.Helper()
	prefix := "bf-" + name + "-"
	for _, l := range strings.Split(virsh(t, e, "list", "--all", "--name"), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, prefix) {
			domains = append(domains, l)
		}
	}
	for _, l := range strings.Split(virsh(t, e, "vol-list", e.Pool), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			volumes = append(volumes, f[0])
		}
	}
	return domains, volumes
}

// sweepAtEnd removes leftovers of provider name now (an earlier aborted run)
// and again after the test (registered first, so it runs after the
// providers are stopped).
func sweepAtEnd(t *testing.T, e env, name string) {
	t.Helper()
	sweep := func() {
		doms, vols := ours(t, e, name)
		for _, d := range doms {
			cleanupDomain(t, e, d)
		}
		for _, v := range vols {
			virsh(t, e, "vol-delete", "--pool", e.Pool, v)
		}
	}
	sweep()
	t.Cleanup(sweep)
}

// assertNothingLeft fails if any domain or volume of provider name exists.
func assertNothingLeft(t *testing.T, e env, name string) {
	t.Helper()
	if doms, vols := ours(t, e, name); len(doms)+len(vols) > 0 {
		t.Fatalf("left behind: domains %v volumes %v", doms, vols)
	}
}

// domainMetadata reads our metadata element of a domain with virsh.
func domainMetadata(t *testing.T, e env, domain string) meta.Metadata {
	t.Helper()
	out, err := exec.Command("virsh", "-q", "-c", e.URI, "metadata", domain, "--uri", meta.NS).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh metadata %s: %v: %s", domain, err, out)
	}
	md, err := meta.Decode(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("decode metadata of %s: %v\n%s", domain, err, out)
	}
	return md
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
