//go:build soak

package soak

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// Timeouts the provider runs with: generous for TCG guests on 2 cores.
const (
	createTimeout    = 3 * time.Minute
	configureTimeout = 3 * time.Minute
	drainTimeout     = 2 * time.Minute
	deleteTimeout    = 2 * time.Minute
	instanceType     = "soak.tiny"
)

// provider is bin/libvirt, restarted on the same --state and --addr as often
// as the faults say. Its output of every run goes to one log file.
type provider struct {
	bin, dir, state, addr string
	args                  []string
	logPath               string
	conn                  *grpc.ClientConn // one for the whole soak, like a shard's

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	starts []time.Time
}

func newProvider(p params, e env, dir string) (*provider, error) {
	types := filepath.Join(dir, "types.json")
	offers := filepath.Join(dir, "offerings.json")
	if err := os.WriteFile(types, []byte(`[{"name":"`+instanceType+`","vcpu":1,"memory_mib":256}]`), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(offers, []byte(fmt.Sprintf(
		`[{"instance_type":%q,"zone":"local","capacity_type":"on_demand","count":%d}]`, instanceType, p.Machines)), 0o644); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	// A private copy: bin/libvirt may be rebuilt by someone else while the
	// soak restarts the provider a hundred times.
	bin := filepath.Join(dir, "libvirt")
	if err := copyFile(p.Bin, bin); err != nil {
		return nil, err
	}
	pr := &provider{bin: bin, dir: dir, state: filepath.Join(dir, "state.db"), addr: addr,
		logPath: filepath.Join(dir, "provider.log")}
	pr.args = []string{"--addr=" + addr, "--metrics-addr=", "--provider=" + p.Provider,
		"--connect=local=" + e.URI, "--image=" + e.Image, "--storage-pool=" + e.Pool, "--network=" + e.Network,
		"--kernel=" + e.Kernel, "--initrd=" + e.Initrd, "--cmdline=" + e.Cmdline,
		"--instance-types=" + types, "--offerings=" + offers, "--state=" + pr.state,
		"--reconcile-interval=3s", "--log-format=text", "--log-level=info",
		"--create-timeout=" + createTimeout.String(), "--configure-timeout=" + configureTimeout.String(),
		"--drain-timeout=" + drainTimeout.String(), "--delete-timeout=" + deleteTimeout.String(),
		"--shutdown-timeout=" + p.ShutdownTimeout.String(), "--drain-margin=10s"}
	if e.DomainType != "" {
		pr.args = append(pr.args, "--domain-type="+e.DomainType)
	}
	tlsFlags, creds, err := adminWriteFlags(bin, dir)
	if err != nil {
		return nil, err
	}
	pr.args = append(pr.args, tlsFlags...)
	// A shard reconnects quickly after a provider restart; grpc-go's
	// default backoff would grow to two minutes over a hundred restarts.
	pr.conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}))
	return pr, err
}

// start runs the binary and waits until it serves List.
func (pr *provider) start() error {
	logf, err := os.OpenFile(pr.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "==== soak: start %s\n", time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(pr.bin, pr.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	logf.Close() // the child has its own copy
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	pr.mu.Lock()
	pr.cmd, pr.done = cmd, done
	pr.starts = append(pr.starts, time.Now())
	pr.mu.Unlock()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := pr.conn.Invoke(ctx, methodPrefix+"List", &pb.ListFilter{}, &pb.MachineList{})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("provider exited at startup (%s); log tail:\n%s", cmd.ProcessState, pr.tail(20, ""))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("provider not serving after 90s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (pr *provider) running() (*exec.Cmd, chan struct{}) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.cmd, pr.done
}

// kill SIGKILLs the provider and waits for the process to be gone.
func (pr *provider) kill() {
	cmd, done := pr.running()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// term sends SIGTERM and waits for the exit (SIGKILL after limit). It
// returns how long the exit took and whether the process exited by itself.
func (pr *provider) term(limit time.Duration) (time.Duration, bool) {
	cmd, done := pr.running()
	if cmd == nil {
		return 0, true
	}
	t0 := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return time.Since(t0), true
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		return time.Since(t0), false
	}
}

// lastStart is when the running provider was started.
func (pr *provider) lastStart() time.Time {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if len(pr.starts) == 0 {
		return time.Time{}
	}
	return pr.starts[len(pr.starts)-1]
}

// tail returns the last n lines of the provider's log, only those that
// mention grep when it is not empty.
func (pr *provider) tail(n int, grep string) string {
	b, err := os.ReadFile(pr.logPath)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n")) {
		if grep == "" || bytes.Contains(l, []byte(grep)) {
			lines = append(lines, string(l))
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    | " + strings.Join(lines, "\n    | ")
}

const methodPrefix = "/bigfleet.v1alpha1.CapacityProvider/"

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}
