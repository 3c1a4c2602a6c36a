//go:build integration && pool

// The zone-of-hosts suite (issue 12): bin/libvirt with --hosts naming two
// independent libvirt daemons of this machine in one zone: the system
// libvirtd of scripts/libvirt-env.sh and the session libvirtd of
// scripts/libvirt-second-host.sh. Run it with `make test-pool`, which brings
// both up and the second one down again; without BIGFLEET_HOST2_ENV it
// skips. A session daemon has no libvirt networks, so the guests have no
// NIC (--network=): the guest agent talks over virtio-serial.
package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/capacity"
)

const (
	poolZone  = "pool"
	poolType  = "pool.tiny" // 1 vCPU, 256 MiB: light TCG guests
	sysHost   = "system"    // the system libvirtd
	otherHost = "session"   // the second host's session libvirtd
)

// poolEnv is both hosts: the system env plus the second host's URI.
type poolEnv struct {
	env
	URI2   string // the second host's socket URI
	script string // scripts/libvirt-second-host.sh
}

func loadPoolEnv(t *testing.T) poolEnv {
	t.Helper()
	e := loadEnv(t)
	path := os.Getenv("BIGFLEET_HOST2_ENV")
	if path == "" {
		t.Skip("BIGFLEET_HOST2_ENV is not set: run `make test-pool` (it runs scripts/libvirt-second-host.sh up)")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pe := poolEnv{env: e, script: "../../scripts/libvirt-second-host.sh"}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "export BIGFLEET_HOST2_URI="); ok {
			pe.URI2 = strings.Trim(v, `'"`)
		}
	}
	if pe.URI2 == "" {
		t.Fatalf("%s lacks BIGFLEET_HOST2_URI", path)
	}
	return pe
}

// uri is the libvirt URI of a host of the pool by name.
func (pe poolEnv) uri(host string) string {
	if host == otherHost {
		return pe.URI2
	}
	return pe.URI
}

// hostsFile is the --hosts file, typed. JSON is YAML (1.2 is a superset),
// so it is written with encoding/json.
type hostsFile struct {
	Hosts []hostEntry `json:"hosts"`
}

type hostEntry struct {
	Name       string            `json:"name"`
	Zone       string            `json:"zone"`
	URI        string            `json:"uri"`
	Labels     map[string]string `json:"labels,omitempty"`
	Overcommit *overcommit       `json:"overcommit,omitempty"`
	Cordoned   bool              `json:"cordoned,omitempty"`
}

type overcommit struct {
	CPU    float64 `json:"cpu"`
	Memory float64 `json:"memory"`
}

// poolHosts is both hosts in zone pool with the given overcommit (nil:
// the defaults) and the named hosts cordoned from the start.
func (pe poolEnv) poolHosts(oc *overcommit, cordoned ...string) hostsFile {
	var f hostsFile
	for _, h := range []string{sysHost, otherHost} {
		f.Hosts = append(f.Hosts, hostEntry{Name: h, Zone: poolZone, URI: pe.uri(h),
			Labels: map[string]string{"daemon": h}, Overcommit: oc, Cordoned: slices.Contains(cordoned, h)})
	}
	return f
}

type poolProvider struct {
	*binProc
	out   *lockedBuffer
	done  chan struct{}
	admin *grpc.ClientConn // the same server, with the admin client's certificate
}

// startPool runs bin/libvirt on the hosts file with slots of poolType in
// zone pool (extra: more flags), and waits until it serves and both hosts
// are connected.
func startPool(t *testing.T, pe poolEnv, name string, hosts hostsFile, slots int, extra ...string) *poolProvider {
	t.Helper()
	bin := providerBinary(t)
	dir := t.TempDir()
	hostsPath, types, offers := filepath.Join(dir, "hosts.yaml"), filepath.Join(dir, "types.json"), filepath.Join(dir, "offerings.json")
	writeJSON(t, hostsPath, hosts)
	writeJSON(t, types, []capacity.InstanceType{{Name: poolType, VCPU: 1, MemoryMiB: 256}})
	writeJSON(t, offers, []capacity.Offering{{InstanceType: poolType, Zone: poolZone, CapacityType: capacity.OnDemand, Count: slots}})
	addr := freeAddr(t)
	args := []string{"--addr=" + addr, "--metrics-addr=", "--provider=" + name, "--hosts=" + hostsPath,
		"--image=" + pe.Image, "--storage-pool=" + pe.Pool, "--network=",
		"--kernel=" + pe.Kernel, "--initrd=" + pe.Initrd, "--cmdline=" + pe.Cmdline,
		"--instance-types=" + types, "--offerings=" + offers,
		"--reconcile-interval=1s", "--log-format=text", "--log-level=debug", "--domain-type=" + pe.DomainType, callTimeoutArg,
		// Both daemons are on this machine and have no QEMU TLS
		// certificates; encrypted migration between real hosts is the
		// lab's (TestLabMigrate).
		"--migrate-tls=false"}
	args = append(args, extra...)
	tlsFlags, creds := adminWriteFlags(t, bin)
	cmd := exec.Command(bin, append(args, tlsFlags...)...)
	p := &poolProvider{out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	must(t, cmd.Start())
	go func() { _ = cmd.Wait(); close(p.done) }()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	must(t, err)
	p.binProc, p.admin = &binProc{cmd: cmd, conn: conn}, conn
	t.Cleanup(func() {
		conn.Close()
		(&provider{binProc: p.binProc, done: p.done}).stop(t)
		if t.Failed() {
			t.Logf("bin/libvirt (%s) output:\n%s", name, p.out)
		}
	})
	awaitServing(t, p.binProc, p.done, p.out)
	p.awaitHost(t, sysHost, true)
	p.awaitHost(t, otherHost, true)
	return p
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := json.MarshalIndent(v, "", "  ")
	must(t, err)
	must(t, os.WriteFile(path, raw, 0o644))
}

// host is the admin view of the named host.
func (p *poolProvider) host(t *testing.T, name string) *adminv1.Host {
	t.Helper()
	return hostView(t, p.conn, name)
}

func (p *poolProvider) awaitHost(t *testing.T, name string, connected bool) {
	t.Helper()
	awaitHostView(t, p.conn, name, connected)
}

// slots returns n SPECULATIVE machines of zone pool.
func (p *poolProvider) slots(t *testing.T, n int) []string {
	t.Helper()
	var l pb.MachineList
	must(t, p.call(t.Context(), "List", &pb.ListFilter{States: []pb.MachineState{pb.MachineState_MACHINE_STATE_SPECULATIVE}}, &l))
	var ids []string
	for _, m := range l.GetMachines() {
		if m.GetZone() == poolZone && len(ids) < n {
			ids = append(ids, m.GetId())
		}
	}
	if len(ids) < n {
		t.Fatalf("want %d speculative slots in zone %s, have %d", n, poolZone, len(ids))
	}
	return ids
}

// placed splits a HostRef.ref "zone/host/domain".
func placed(t *testing.T, m *pb.Machine) (host, domain string) {
	t.Helper()
	parts := strings.Split(m.GetHost().GetRef(), "/")
	if len(parts) != 3 || parts[0] != poolZone {
		t.Fatalf("%s: host ref %q, want %s/<host>/<domain>", m.GetId(), m.GetHost().GetRef(), poolZone)
	}
	return parts[1], parts[2]
}

// createAll sends the Creates at once (the reservations race) and waits
// for each to be IDLE; it returns each one's host and domain, removing the
// domains at cleanup.
func (p *poolProvider) createAll(t *testing.T, ctx context.Context, pe poolEnv, ids ...string) map[string][2]string {
	t.Helper()
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, id := range ids {
		wg.Go(func() {
			var ack pb.TransitionAck
			errs[i] = p.call(ctx, "Create", &pb.CreateRequest{MachineId: id}, &ack)
		})
	}
	wg.Wait()
	where := map[string][2]string{}
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("Create %s: %v", id, errs[i])
		}
		h, d := placed(t, p.await(t, ctx, id, pb.MachineState_MACHINE_STATE_IDLE))
		where[id] = [2]string{h, d}
		t.Cleanup(func() { cleanupDomain(t, env{URI: pe.uri(h), Pool: pe.Pool}, d) })
	}
	t.Logf("TIMING %d concurrent Creates → IDLE: %s", len(ids), time.Since(t0).Round(time.Millisecond))
	return where
}

// onHost says whether the domain is defined on the named host (virsh on
// that daemon, not the provider's word).
func onHost(t *testing.T, pe poolEnv, host, domain string) bool {
	t.Helper()
	for _, d := range strings.Fields(virsh(t, env{URI: pe.uri(host)}, "list", "--all", "--name")) {
		if d == domain {
			return true
		}
	}
	return false
}

func (p *poolProvider) get(t *testing.T, id string) *pb.Machine {
	t.Helper()
	var m pb.Machine
	must(t, p.call(t.Context(), "Get", &pb.MachineRef{Id: id}, &m))
	return &m
}

func secondHost(t *testing.T, pe poolEnv, cmd string) {
	t.Helper()
	out, err := exec.Command(pe.script, cmd).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", pe.script, cmd, err, out)
	}
}

// awaitAny polls Get until the machine is in one of the states.
func (p *poolProvider) awaitAny(t *testing.T, ctx context.Context, id string, states ...pb.MachineState) *pb.Machine {
	t.Helper()
	for {
		m := p.get(t, id)
		if slices.Contains(states, m.GetState()) {
			return m
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s stuck in %s waiting for %v", id, m.GetState(), states)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// awaitLog polls the provider's output until one line holds every part.
func (p *poolProvider) awaitLog(t *testing.T, ctx context.Context, parts ...string) {
	t.Helper()
	for {
		for _, l := range strings.Split(p.out.String(), "\n") {
			if !slices.ContainsFunc(parts, func(s string) bool { return !strings.Contains(l, s) }) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no provider log line holds all of %q", parts)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sendAll sends one mutation per machine at once, without waiting for the
// transitions.
func (p *poolProvider) sendAll(t *testing.T, ctx context.Context, method string, req func(id string) proto.Message, ids ...string) {
	t.Helper()
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			var ack pb.TransitionAck
			errs[i] = p.call(ctx, method, req(id), &ack)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s %s: %v", method, ids[i], err)
		}
	}
}

// adminCall invokes an admin RPC with the admin client's certificate.
func (p *poolProvider) adminCall(t *testing.T, method string, req, res proto.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.admin.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/"+method, req, res); err != nil {
		t.Fatalf("admin %s: %v", method, err)
	}
}
