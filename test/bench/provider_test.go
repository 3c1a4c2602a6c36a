package bench

import (
	"bufio"
	"context"
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
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

const svc = "/bigfleet.v1alpha1.CapacityProvider/"

// provider is a running bin/libvirt process.
type provider struct {
	cmd         *exec.Cmd
	addr        string
	metricsAddr string // "" when the process serves no metrics
	conn        *grpc.ClientConn

	stopped bool
}

// binary is bin/libvirt, or $BENCH_BINARY (to measure another build, e.g.
// the "before" of a change, with the same harness).
func binary(tb testing.TB) string {
	p := os.Getenv("BENCH_BINARY")
	if p == "" {
		p = "../../bin/libvirt"
	}
	p, err := filepath.Abs(p)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("bin/libvirt not built (run make build): %v", err)
	}
	return p
}

func freePort(tb testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start launches the provider on a fresh state file with n slots and waits
// until it answers.
func start(tb testing.TB, n int, state string) *provider {
	tb.Helper()
	p := launch(tb, n, state)
	p.waitReady(tb, 50*time.Millisecond)
	return p
}

// launch starts the process and connects a client, without waiting.
func launch(tb testing.TB, n int, state string) *provider {
	tb.Helper()
	addr, metricsAddr := freePort(tb), freePort(tb)
	// The command line of the independent conformance suite's runs, so
	// the figures include what it pays for: info logging, the periodic
	// reconcile, metrics (on a free port: two runs must not collide).
	cmd := exec.Command(binary(tb), "--addr="+addr, "--provider=certify", "--use-fake-backend",
		"--seed-count="+strconv.Itoa(n), "--state="+state, "--metrics-addr="+metricsAddr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	// A full List of 100k machines is ~20 MB, over grpc-go's 4 MiB default
	// receive limit; BigFleet's client pages or raises the limit the same way.
	// The process is not listening yet: grpc-go's default reconnect backoff
	// (1 s, growing) would add up to a second to the measured boot, so the
	// client retries every 10 ms instead.
	p := &provider{cmd: cmd, addr: addr, metricsAddr: metricsAddr}
	p.conn = p.dial(tb)
	tb.Cleanup(p.stop)
	return p
}

// dial makes a client connection of its own, as each BigFleet shard has.
func (p *provider) dial(tb testing.TB) *grpc.ClientConn {
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: time.Second,
			Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond}}))
	if err != nil {
		tb.Fatal(err)
	}
	return conn
}

// waitReady polls List(max_results=1) every poll until it succeeds.
func (p *provider) waitReady(tb testing.TB, poll time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.list(ctx, &pb.ListFilter{MaxResults: 1})
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("provider did not answer: %v", err)
		}
		time.Sleep(poll)
	}
}

// stop ends the process (SIGTERM, then SIGKILL after 10 s); calling it
// again is harmless.
func (p *provider) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	p.conn.Close()
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

func (p *provider) list(ctx context.Context, f *pb.ListFilter) (*pb.MachineList, error) {
	out := new(pb.MachineList)
	err := p.conn.Invoke(ctx, svc+"List", f, out)
	return out, err
}

// listRaw is a full List whose answer is kept as bytes, not decoded: the
// server's share of a List, without the client's decoding.
func (p *provider) listRaw(ctx context.Context, f *pb.ListFilter) ([]byte, error) {
	var out rawMessage
	err := p.conn.Invoke(ctx, svc+"List", f, &out, grpc.ForceCodecV2(rawCodec{}))
	return out.b, err
}

func (p *provider) create(ctx context.Context, id string) error {
	return p.conn.Invoke(ctx, svc+"Create", &pb.CreateRequest{MachineId: id}, new(pb.TransitionAck))
}

func (p *provider) delete(ctx context.Context, id string) error {
	return p.conn.Invoke(ctx, svc+"Delete", &pb.DeleteRequest{MachineId: id}, new(pb.TransitionAck))
}

func get(ctx context.Context, conn *grpc.ClientConn, id string) error {
	return conn.Invoke(ctx, svc+"Get", &pb.MachineRef{Id: id}, new(pb.Machine))
}

// ids returns every machine id, in List order.
func (p *provider) ids(tb testing.TB) []string {
	l, err := p.list(context.Background(), &pb.ListFilter{})
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]string, len(l.Machines))
	for i, m := range l.Machines {
		out[i] = m.Id
	}
	return out
}

// cpuTime is the CPU time (user + system) the provider process has used.
func (p *provider) cpuTime(tb testing.TB) time.Duration {
	u, s := p.cpuSplit(tb)
	return u + s
}

// cpuSplit is the CPU time the provider process has used in user space
// and in the kernel.
func (p *provider) cpuSplit(tb testing.TB) (user, sys time.Duration) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command name (which may hold spaces): utime and
	// stime are the 12th and 13th, in clock ticks (100 per second on Linux).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut) * 10 * time.Millisecond, time.Duration(st) * 10 * time.Millisecond
}

// rssKiB reads the provider's resident set size.
func (p *provider) rssKiB(tb testing.TB) int { return p.status(tb, "VmRSS:") }

// peakRSSKiB reads the provider's peak resident set size (VmHWM).
func (p *provider) peakRSSKiB(tb testing.TB) int { return p.status(tb, "VmHWM:") }

// status reads one kB field of /proc/PID/status.
func (p *provider) status(tb testing.TB, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}

// scrape reads the provider's /metrics: every sample line, keyed by its
// series (name and labels as written), e.g.
// `store_commit_duration_seconds_sum`. Empty without a metrics address.
func (p *provider) scrape(tb testing.TB) map[string]float64 {
	out := map[string]float64{}
	if p.metricsAddr == "" {
		return out
	}
	res, err := http.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	s := bufio.NewScanner(res.Body)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}
