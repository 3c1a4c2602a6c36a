package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// The client side follows test/bench/provider_test.go (make bench): plain
// grpc-go with conn.Invoke, as BigFleet's shards call the provider.
const (
	svc   = "/bigfleet.v1alpha1.CapacityProvider/"
	admin = "/libvirtprovider.admin.v1.AdminService/"
)

// provider is a running bin/libvirt process.
type provider struct {
	cmd     *exec.Cmd
	addr    string
	conn    *grpc.ClientConn
	started time.Time
	exited  chan struct{}
	log     *os.File
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// launch starts the binary with args (plus --addr and --metrics-addr on
// free ports), its stdout and stderr to logPath, and dials it.
func launch(binary string, args []string, logPath string) (*provider, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	maddr, err := freePort()
	if err != nil {
		return nil, err
	}
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, append([]string{"--addr=" + addr, "--metrics-addr=" + maddr}, args...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	p := &provider{cmd: cmd, addr: addr, exited: make(chan struct{}), log: lf}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	go func() { cmd.Wait(); close(p.exited) }()
	// The process is not listening yet: grpc-go's default reconnect backoff
	// (1 s, growing) would add up to a second to the measured start, so
	// the client retries every 10 ms instead.
	p.conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: time.Second,
			Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond}}))
	if err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// waitServing polls List(max_results=1) every 10 ms until it succeeds and
// returns the time from the process start.
func (p *provider) waitServing(limit time.Duration) (time.Duration, error) {
	deadline := p.started.Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := p.conn.Invoke(ctx, svc+"List", &pb.ListFilter{MaxResults: 1}, new(pb.MachineList))
		cancel()
		if err == nil {
			return time.Since(p.started), nil
		}
		select {
		case <-p.exited:
			return 0, fmt.Errorf("provider exited before serving (see %s)", p.log.Name())
		default:
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("provider did not serve within %s: %v", limit, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *provider) list(ctx context.Context) ([]*pb.Machine, error) {
	out := new(pb.MachineList)
	err := p.conn.Invoke(ctx, svc+"List", &pb.ListFilter{}, out)
	return out.GetMachines(), err
}

func (p *provider) create(ctx context.Context, id string) error {
	return p.conn.Invoke(ctx, svc+"Create", &pb.CreateRequest{MachineId: id}, new(pb.TransitionAck))
}

func (p *provider) summary(ctx context.Context) (*adminv1.GetFleetSummaryResponse, error) {
	out := new(adminv1.GetFleetSummaryResponse)
	err := p.conn.Invoke(ctx, admin+"GetFleetSummary", &adminv1.GetFleetSummaryRequest{}, out)
	return out, err
}

func (p *provider) hosts(ctx context.Context) ([]*adminv1.Host, error) {
	out := new(adminv1.ListHostsResponse)
	err := p.conn.Invoke(ctx, admin+"ListHosts", &adminv1.ListHostsRequest{}, out)
	return out.GetHosts(), err
}

// terminate sends SIGTERM and returns how long the process took to exit;
// past limit it is killed and ok is false.
func (p *provider) terminate(limit time.Duration) (d time.Duration, ok bool) {
	p.conn.Close()
	t := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		d, ok = time.Since(t), true
	case <-time.After(limit):
		p.cmd.Process.Kill()
		<-p.exited
		d = time.Since(t)
	}
	p.log.Close()
	return d, ok
}

func (p *provider) kill() {
	p.cmd.Process.Kill()
	<-p.exited
	p.log.Close()
}

// procStat is what /proc/PID/status says about the provider.
type procStat struct {
	Threads        int
	RSSKiB, HWMKiB int
}

func (p *provider) stat() (procStat, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return procStat{}, err
	}
	defer f.Close()
	var s procStat
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.Atoi(f[0])
		switch k {
		case "Threads":
			s.Threads = n
		case "VmRSS":
			s.RSSKiB = n
		case "VmHWM":
			s.HWMKiB = n
		}
	}
	return s, sc.Err()
}

// startupLine returns the "startup" figure of the provider's serving log
// line (JSON logs), or "".
func startupLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, `"msg":"serving"`) {
			continue
		}
		if _, v, ok := strings.Cut(l, `"startup":"`); ok {
			v, _, _ = strings.Cut(v, `"`)
			return v
		}
	}
	return ""
}
