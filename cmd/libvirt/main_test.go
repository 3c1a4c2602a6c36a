package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// runMainEnv makes the test binary run the real main() instead of the
// tests, so a test can send a real SIGTERM to a real provider process
// without building the binary separately.
const runMainEnv = "LIBVIRT_PROVIDER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestHelpListsEveryFlag(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"--help"}, &out, io.Discard); err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, name := range []string{"addr", "provider", "connect", "default-zone", "offerings", "seed-count",
		"capacity-type", "instance-types", "prices", "price-per-vcpu-hour", "price-per-gib-hour", "state", "image",
		"storage-pool", "network", "base-user-data", "kernel", "initrd", "cmdline", "reconcile-interval",
		"metrics-addr", "reflection", "tls-cert", "tls-key", "tls-ca", "use-fake-backend", "create-timeout",
		"configure-timeout", "drain-timeout", "delete-timeout", "fake-delay", "log-level", "log-format", "admin-write",
		"admin-clients", "admin-addr", "admin-tls-ca", "tls-reload-interval", "caller-identity"} {
		if !regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(name) + `\b`).MatchString(out.String()) {
			t.Errorf("--help does not list --%s", name)
		}
	}
	for _, def := range []string{`(default ":9000")`, `(default ":9090")`, `(default 32)`, `(default 2m0s)`, `(default "on_demand")`} {
		if !strings.Contains(out.String(), def) {
			t.Errorf("--help lacks %s", def)
		}
	}
}

func TestFlagRefusals(t *testing.T) {
	t.Parallel()
	fake := "--use-fake-backend"
	cases := []struct {
		args []string
		want string
	}{
		{nil, "--connect is required"},
		{[]string{"--connect=qemu:///system", fake}, "mutually exclusive"},
		{[]string{fake, "--seed-count=-1"}, "--seed-count"},
		{[]string{fake, "--capacity-type=spot"}, "--capacity-type"},
		{[]string{fake, "--capacity-type="}, "--capacity-type"},
		{[]string{fake, "--create-timeout=-1s"}, "--create-timeout"},
		{[]string{fake, "--configure-timeout=0"}, "--configure-timeout"},
		{[]string{fake, "--drain-timeout=-5m"}, "--drain-timeout"},
		{[]string{fake, "--delete-timeout=-1s"}, "--delete-timeout"},
		{[]string{fake, "--reconcile-interval=-1s"}, "--reconcile-interval"},
		{[]string{fake, "--fake-delay=-1s"}, "--fake-delay"},
		{[]string{"--connect=qemu:///system", "--fake-delay=1s"}, "--use-fake-backend"},
		{[]string{fake, "--log-level=loud"}, "--log-level"},
		{[]string{fake, "--log-format=xml"}, "--log-format"},
		{[]string{fake, "--initrd=/boot/initrd"}, "--kernel"},
		{[]string{fake, "--provider="}, "--provider"},
		{[]string{fake, "--no-such-flag"}, "no-such-flag"},
		{[]string{fake, "stray"}, "stray"},
		{[]string{fake, "--tls-cert=/x.pem"}, "--tls-cert requires --tls-key"},
		{[]string{fake, "--tls-key=/x.pem"}, "--tls-key requires --tls-cert"},
		{[]string{fake, "--tls-ca=/ca.pem"}, "--tls-ca requires --tls-cert and --tls-key"},
		{[]string{fake, "--tls-cert=/nope.pem", "--tls-key=/nope-key.pem"}, "--tls-cert: open /nope.pem"},
		{[]string{fake, "--prices=kvm.small"}, "--prices"},
		{[]string{fake, "--offerings=/does/not/exist.json"}, "--offerings"},
		{[]string{fake, "--price-per-vcpu-hour=-1"}, "--price-per-vcpu-hour"},
		{[]string{"--connect=qemu:///system"}, "--connect"},
		{[]string{fake, "--tls-reload-interval=-1s"}, "--tls-reload-interval"},
		// Admin writes destroy VMs: never without a verified, listed caller.
		{[]string{fake, "--admin-write"}, "--admin-write requires mutual TLS"},
		{[]string{fake, "--admin-write", "--admin-clients=ops.test", "--tls-cert=/c.pem", "--tls-key=/k.pem"}, "--admin-write requires mutual TLS"},
		{[]string{fake, "--admin-write", "--tls-cert=/c.pem", "--tls-key=/k.pem", "--tls-ca=/ca.pem"}, "--tls-cert: open /c.pem"}, // valid: bigfleet://admin by default
		// Binding callers to certificates needs certificates.
		{[]string{fake, "--caller-identity=bigfleet"}, "--caller-identity=bigfleet needs mTLS"},
		{[]string{fake, "--caller-identity=bigfleet", "--tls-cert=/c.pem", "--tls-key=/k.pem"}, "--caller-identity=bigfleet needs mTLS"},
		{[]string{fake, "--caller-identity=shard"}, "--caller-identity \"shard\": want bigfleet or any"},
		{[]string{fake, "--caller-identity=bigfleet", "--tls-cert=/c.pem", "--tls-key=/k.pem", "--tls-ca=/ca.pem"}, "--tls-cert: open /c.pem"}, // valid
		{[]string{fake, "--admin-write", "--admin-clients=ops.test", "--tls-cert=/c.pem", "--tls-key=/k.pem", "--tls-ca=/ca.pem",
			"--admin-addr=127.0.0.1:0"}, "--tls-cert: open /c.pem"}, // valid: the admin listener falls back to --tls-ca
		{[]string{fake, "--admin-clients=ops.test"}, "--admin-clients has no effect without --admin-write"},
		{[]string{fake, "--admin-write", "--admin-clients=*", "--tls-ca=/ca.pem"}, "--admin-clients: pattern"},
		{[]string{fake, "--admin-tls-ca=/ca.pem"}, "--admin-tls-ca needs --admin-addr"},
		{[]string{fake, "--admin-addr=127.0.0.1:0", "--admin-tls-ca=/ca.pem"}, "--admin-tls-ca requires --tls-cert and --tls-key"},
		{[]string{fake, "--addr=127.0.0.1:9", "--admin-addr=127.0.0.1:9"}, "--admin-addr must differ from --addr"},
		// The fence command and its delay go together (issue 38).
		{[]string{fake, "--fence-command=/bin/true"}, "--fence-command needs --host-down-after"},
		{[]string{fake, "--host-down-after=1m"}, "--host-down-after needs --fence-command"},
		{[]string{fake, "--fence-command=/bin/true", "--host-down-after=2s"}, "--host-down-after 2s: want at least 10s"},
		{[]string{fake, "--fence-command=fence.sh", "--host-down-after=1m"}, "--fence-command fence.sh: want an absolute path"},
		{[]string{fake, "--fence-command=/does/not/exist", "--host-down-after=1m"}, "--fence-command /does/not/exist: stat"},
		{[]string{fake, "--fence-command=/etc/passwd", "--host-down-after=1m"}, "--fence-command /etc/passwd: not executable"},
		{[]string{fake, "--fence-command=/tmp", "--host-down-after=1m"}, "--fence-command /tmp: not a regular file"},
		{[]string{fake, "--fence-command=/bin/true", "--host-down-after=1m", "--fence-timeout=0s"}, "--fence-timeout must be positive"},
		{[]string{fake, "--fence-timeout=1m"}, "--fence-timeout needs --fence-command"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			args := append([]string{"--addr=127.0.0.1:0", "--metrics-addr="}, tc.args...)
			err := run(t.Context(), args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%v) = %v; want an error mentioning %q", tc.args, err, tc.want)
			}
		})
	}
}

// syncBuf is a goroutine-safe writer the tests can scan while run writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// provider is run() in a goroutine; stop cancels its context (SIGTERM).
type provider struct {
	addr   string
	stdout *syncBuf
	stderr *syncBuf
	stop   func() error
}

func startProvider(t *testing.T, args ...string) *provider {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	p := &provider{stdout: &syncBuf{}, stderr: &syncBuf{}}
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{"--addr=127.0.0.1:0"}, args...), p.stdout, p.stderr) }()
	var once sync.Once
	var stopErr error
	p.stop = func() error {
		once.Do(func() { cancel(); stopErr = <-done })
		return stopErr
	}
	t.Cleanup(func() { _ = p.stop() })
	re := regexp.MustCompile(`listening on (\S+) `)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(p.stdout.String()); m != nil {
			p.addr = m[1]
			return p
		}
		select {
		case err := <-done:
			t.Fatalf("run exited early: %v\n%s", err, p.stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("provider did not start:\n%s", p.stderr)
	return nil
}

func (p *provider) list(t *testing.T) *pb.MachineList {
	t.Helper()
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	out := new(pb.MachineList)
	if err := conn.Invoke(t.Context(), "/bigfleet.v1alpha1.CapacityProvider/List", &pb.ListFilter{}, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// logLines returns the JSON log records with the given msg.
func (p *provider) logLines(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestServeRestart: a state file survives a restart, startup warnings are
// there, and the banner's curl line points at the bound port.
func TestServeRestart(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state.db")
	args := []string{"--use-fake-backend", "--seed-count=500", "--state=" + state, "--metrics-addr=", "--fake-zones=za,zb"}
	p := startProvider(t, args...)
	if n := len(p.list(t).GetMachines()); n != 500 {
		t.Fatalf("List = %d machines, want 500", n)
	}
	if !strings.Contains(p.stdout.String(), "curl -s -H 'Content-Type: application/json' -d '{}' http://"+p.addr+"/bigfleet.v1alpha1.CapacityProvider/List") {
		t.Errorf("banner lacks a ready-to-paste curl line:\n%s", p.stdout)
	}
	serving := p.logLines("serving")
	if len(serving) != 1 || serving[0]["security"] != "insecure" {
		t.Errorf("serving log = %v", serving)
	}
	if !strings.Contains(p.stderr.String(), "NOT for production") {
		t.Error("no fake-backend warning")
	}
	if err := p.stop(); err != nil {
		t.Fatalf("clean shutdown returned %v", err)
	}
	if len(p.logLines("stopped")) != 1 {
		t.Errorf("no stopped log:\n%s", p.stderr)
	}
	p2 := startProvider(t, args...)
	if n := len(p2.list(t).GetMachines()); n != 500 {
		t.Fatalf("after restart List = %d machines, want 500", n)
	}
}

func TestMemoryStateWarns(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "--use-fake-backend", "--seed-count=3", "--metrics-addr=")
	if !strings.Contains(p.stderr.String(), "LOST on exit") {
		t.Errorf("no in-memory state warning:\n%s", p.stderr)
	}
}

// TestMetricsPortBusy: the API keeps serving when --metrics-addr is taken.
func TestMetricsPortBusy(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	p := startProvider(t, "--use-fake-backend", "--seed-count=2", "--metrics-addr="+busy.Addr().String())
	if n := len(p.list(t).GetMachines()); n != 2 {
		t.Errorf("List = %d", n)
	}
	if !strings.Contains(p.stderr.String(), "METRICS SERVER NOT STARTED") {
		t.Errorf("no loud error about the metrics port:\n%s", p.stderr)
	}
}

// TestReadyz: /readyz answers 200 while serving, and the ops server is up
// on the address it logged.
func TestReadyz(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "--use-fake-backend", "--seed-count=2", "--metrics-addr=127.0.0.1:0")
	lines := p.logLines("metrics server listening")
	if len(lines) != 1 {
		t.Fatalf("metrics log: %v", lines)
	}
	base := "http://" + lines[0]["metrics_addr"].(string)
	for path, want := range map[string]string{"/readyz": "ok", "/healthz": "ok", "/metrics": `machines{state="SPECULATIVE",zone="zone-a"} 1`, "/metrics#hosts": `host_up{zone="zone-b"} 1`} {
		res, err := http.Get(base + strings.Split(path, "#")[0])
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d, lacks %q", path, res.StatusCode, want)
		}
	}
}

// TestSIGTERMLetsConfigureFinish (issue 10, path 4): a real provider
// process SIGTERMed in the middle of a Configure lets it finish within
// --shutdown-timeout, exits cleanly, and comes back with the machine
// CONFIGURED (it used to come back FAILED, "interrupted by a provider
// restart").
func TestSIGTERMLetsConfigureFinish(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state.db")
	args := []string{"--use-fake-backend", "--seed-count=2", "--state=" + state, "--metrics-addr=",
		"--addr=127.0.0.1:0", "--fake-delay=1s", "--shutdown-timeout=10s"}
	cmd, addr := startChild(t, args)
	c := dial(t, addr)
	ms := c.list(t).GetMachines()
	id, other := ms[0].GetId(), ms[1].GetId()
	c.call(t, "Create", &pb.CreateRequest{MachineId: id})
	c.waitState(t, id, pb.MachineState_MACHINE_STATE_IDLE)
	c.call(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c1", BootstrapBlob: []byte("join")})
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Mutations are accepted until the signal is handled; from then on they
	// are Unavailable, saying why, while reads still work: the listener
	// stays open while the Configure finishes.
	for {
		err := c.conn.Invoke(t.Context(), "/bigfleet.v1alpha1.CapacityProvider/Create",
			&pb.CreateRequest{MachineId: other}, new(pb.TransitionAck))
		if err == nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
			t.Fatalf("mutation during shutdown: %v, want Unavailable saying it is shutting down", err)
		}
		break
	}
	if s := c.get(t, id).GetState(); s != pb.MachineState_MACHINE_STATE_CONFIGURING {
		t.Fatalf("read during shutdown: %s", s)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("provider exit after SIGTERM: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("graceful stop took %s", d)
	}
	_, addr = startChild(t, args)
	m := dial(t, addr).get(t, id)
	if m.GetState() != pb.MachineState_MACHINE_STATE_CONFIGURED || m.GetCluster() != "c1" {
		t.Fatalf("after SIGTERM mid-Configure and restart: %s %q", m.GetState(), m.GetLastError())
	}
}

// startChild runs the provider as a child process (this test binary running
// main) and returns it with the address it listens on.
func startChild(t *testing.T, args []string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`listening on (\S+) `)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case addr := <-found:
		return cmd, addr
	case <-time.After(20 * time.Second):
		t.Fatal("child provider did not start")
	}
	return nil, ""
}

type client struct{ conn *grpc.ClientConn }

func dial(t *testing.T, addr string) client {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return client{conn}
}

func (c client) call(t *testing.T, method string, req any) *pb.TransitionAck {
	t.Helper()
	out := new(pb.TransitionAck)
	if err := c.conn.Invoke(t.Context(), "/bigfleet.v1alpha1.CapacityProvider/"+method, req, out); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return out
}

func (c client) list(t *testing.T) *pb.MachineList {
	t.Helper()
	out := new(pb.MachineList)
	if err := c.conn.Invoke(t.Context(), "/bigfleet.v1alpha1.CapacityProvider/List", &pb.ListFilter{}, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (c client) get(t *testing.T, id string) *pb.Machine {
	t.Helper()
	out := new(pb.Machine)
	if err := c.conn.Invoke(t.Context(), "/bigfleet.v1alpha1.CapacityProvider/Get", &pb.MachineRef{Id: id}, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (c client) waitState(t *testing.T, id string, s pb.MachineState) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m := c.get(t, id)
		if m.GetState() == s {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s (%q), want %s", id, m.GetState(), m.GetLastError(), s)
		}
	}
}
