//go:build soak

package soak

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// Timeouts the provider runs with: generous for TCG guests on 2 cores.
const (
	createTimeout    = 3 * time.Minute
	configureTimeout = 3 * time.Minute
	drainTimeout     = 2 * time.Minute
	deleteTimeout    = 2 * time.Minute
	instanceType     = "soak.tiny"
)

// provider is bin/libvirt (soakkit.Proc: restarted on the same --state and
// --addr as often as the faults say) and the soak's one connection to it.
type provider struct {
	*soakkit.Proc
	state string
	conn  *grpc.ClientConn // one for the whole soak, like a shard's
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
	if err := soakkit.CopyFile(p.Bin, bin); err != nil {
		return nil, err
	}
	pr := &provider{Proc: &soakkit.Proc{Bin: bin, LogPath: filepath.Join(dir, "provider.log")}, state: filepath.Join(dir, "state.db")}
	pr.Args = []string{"--addr=" + addr, "--metrics-addr=", "--provider=" + p.Provider,
		"--connect=local=" + e.URI, "--image=" + e.Image, "--storage-pool=" + e.Pool, "--network=" + e.Network,
		"--kernel=" + e.Kernel, "--initrd=" + e.Initrd, "--cmdline=" + e.Cmdline,
		"--instance-types=" + types, "--offerings=" + offers, "--state=" + pr.state,
		"--reconcile-interval=3s", "--log-format=text", "--log-level=info",
		"--create-timeout=" + createTimeout.String(), "--configure-timeout=" + configureTimeout.String(),
		"--drain-timeout=" + drainTimeout.String(), "--delete-timeout=" + deleteTimeout.String(),
		"--shutdown-timeout=" + p.ShutdownTimeout.String(), "--drain-margin=10s"}
	if e.DomainType != "" {
		pr.Args = append(pr.Args, "--domain-type="+e.DomainType)
	}
	tlsFlags, creds, err := adminWriteFlags(bin, dir)
	if err != nil {
		return nil, err
	}
	pr.Args = append(pr.Args, tlsFlags...)
	// A shard reconnects quickly after a provider restart; grpc-go's
	// default backoff would grow to two minutes over a hundred restarts.
	pr.conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}))
	pr.Ready = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return pr.conn.Invoke(ctx, soakkit.MethodPrefix+"List", &pb.ListFilter{}, &pb.MachineList{})
	}
	return pr, err
}
