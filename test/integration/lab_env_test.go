//go:build integration && lab

// The lab suite (issue 20): bin/libvirt against the remote libvirt hosts of
// scripts/lab.sh, over qemu+tls and qemu+libssh, on libvirt 9.0 and 11.3,
// with the lab's faults. Run it with `make test-lab`, which brings the lab
// up; without /run/bigfleet-lab/env it skips (a failure in CI).
package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/internal/labenv"
	"github.com/bigfleet/libvirt-provider/server/capacity"
)

const labType = "lab.tiny" // 1 vCPU, 256 MiB

// labEnv is /run/bigfleet-lab/env, typed, with the suite's helpers.
type labEnv struct{ labenv.Env }

func loadLab(t *testing.T) labEnv {
	t.Helper()
	e, err := labenv.Load()
	if errors.Is(err, labenv.ErrIncomplete) {
		t.Fatal(err)
	}
	if err != nil {
		t.Skipf("no lab (%v): run `make test-lab`, which runs scripts/lab.sh up", err)
	}
	return labEnv{e}
}

// lab runs scripts/lab.sh with args (fault, heal, exec) and returns its output.
func (e labEnv) lab(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(e.Script, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("lab.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// hostLog is a file of a lab host's own disk (its upper layer), e.g.
// var/log/libvirt/libvirtd.log.
func (e labEnv) hostFile(host, rel string) string {
	return filepath.Join(e.Data, "hosts", host, "upper", rel)
}

// labHosts is a --hosts file (JSON is YAML).
type labHosts struct {
	Hosts []labHost `json:"hosts"`
}

type labHost struct {
	Name     string `json:"name"`
	Zone     string `json:"zone"`
	URI      string `json:"uri"`
	Cordoned bool   `json:"cordoned,omitempty"`
}

// only is the file with just the named hosts.
func (f labHosts) only(names ...string) labHosts {
	var out labHosts
	for _, h := range f.Hosts {
		for _, n := range names {
			if h.Name == n {
				out.Hosts = append(out.Hosts, h)
			}
		}
	}
	return out
}

// labHosts reads a lab hosts file.
func (e labEnv) labHosts(t *testing.T, path string) labHosts {
	t.Helper()
	raw, err := os.ReadFile(path)
	must(t, err)
	// The lab writes YAML in a fixed shape: name, zone, uri, labels.
	var f labHosts
	var cur *labHost
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "- name: "):
			f.Hosts = append(f.Hosts, labHost{Name: strings.TrimPrefix(line, "- name: ")})
			cur = &f.Hosts[len(f.Hosts)-1]
		case cur != nil && strings.HasPrefix(line, "zone: "):
			cur.Zone = strings.TrimPrefix(line, "zone: ")
		case cur != nil && strings.HasPrefix(line, "uri: "):
			cur.URI = strings.Trim(strings.TrimPrefix(line, "uri: "), `"`)
		}
	}
	if len(f.Hosts) == 0 {
		t.Fatalf("no hosts in %s", path)
	}
	return f
}

// labProvider is bin/libvirt serving the lab, with mTLS admin writes.
type labProvider struct {
	*binProc
	out  *lockedBuffer
	done chan struct{}
	name string // --provider: its domains and volumes are bf-<name>-…
}

// startLab runs bin/libvirt on hosts with slots of labType in every zone of
// the file, and waits until it serves and the hosts in wantUp connect.
func startLab(t *testing.T, e labEnv, name string, hosts labHosts, slots int, extra []string, wantUp ...string) *labProvider {
	t.Helper()
	return startLabEnv(t, e, name, hosts, slots, extra, nil, wantUp...)
}

// startLabEnv is startLab with env added to the provider's environment.
func startLabEnv(t *testing.T, e labEnv, name string, hosts labHosts, slots int, extra, env []string, wantUp ...string) *labProvider {
	t.Helper()
	bin := providerBinary(t)
	dir := t.TempDir()
	hostsPath, types, offers := filepath.Join(dir, "hosts.yaml"), filepath.Join(dir, "types.json"), filepath.Join(dir, "offerings.json")
	labJSON(t, hostsPath, hosts)
	labJSON(t, types, []capacity.InstanceType{{Name: labType, VCPU: 1, MemoryMiB: 256}})
	zones := map[string]bool{}
	var offerings []capacity.Offering
	for _, h := range hosts.Hosts {
		if !zones[h.Zone] {
			zones[h.Zone] = true
			offerings = append(offerings, capacity.Offering{InstanceType: labType, Zone: h.Zone, CapacityType: capacity.OnDemand, Count: slots})
		}
	}
	labJSON(t, offers, offerings)
	addr := freeAddr(t)
	args := append([]string{"--addr=" + addr, "--metrics-addr=", "--provider=" + name, "--hosts=" + hostsPath,
		"--instance-types=" + types, "--offerings=" + offers, "--reconcile-interval=2s",
		"--log-format=text", "--log-level=debug"}, e.Args...)
	tlsFlags, creds := adminWriteFlags(t, bin)
	args = append(append(args, tlsFlags...), extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &labProvider{out: &lockedBuffer{}, done: make(chan struct{}), name: name}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	must(t, cmd.Start())
	go func() { _ = cmd.Wait(); close(p.done) }()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	must(t, err)
	p.binProc = &binProc{cmd: cmd, conn: conn}
	t.Cleanup(func() {
		// The provider first: a running one would start an IDLE machine's
		// domain again between the sweep's destroy and undefine.
		conn.Close()
		(&provider{binProc: p.binProc, done: p.done}).stop(t)
		p.sweep(t, e, hosts)
		if t.Failed() {
			t.Logf("bin/libvirt (%s) output:\n%s", name, p.out)
		}
	})
	awaitServing(t, p.binProc, p.done, p.out)
	for _, h := range wantUp {
		p.awaitHost(t, h, true)
	}
	return p
}

// slotIn is a SPECULATIVE machine of zone.
func (p *labProvider) slotIn(t *testing.T, zone string) string {
	t.Helper()
	return p.binProc.slot(t, zone).GetId()
}

// await polls Get until the machine is in one of want (FAILED unwanted
// fails at once with its last_error).
func (p *labProvider) await(t *testing.T, id string, within time.Duration, want ...pb.MachineState) *pb.Machine {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var m pb.Machine
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := p.call(ctx, "Get", &pb.MachineRef{Id: id}, &m)
		cancel()
		if err == nil {
			for _, w := range want {
				if m.GetState() == w {
					return &m
				}
			}
			if m.GetState() == pb.MachineState_MACHINE_STATE_FAILED {
				t.Fatalf("%s went FAILED waiting for %v: %s", id, want, m.GetLastError())
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s after %s, want %v (last error %q, Get err %v)", id, m.GetState(), within, want, m.GetLastError(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sweep removes what the test's provider left on the lab hosts (only its
// own bf-<provider>-… domains and volumes), as root inside each host.
func (p *labProvider) sweep(t *testing.T, e labEnv, hosts labHosts) {
	for _, h := range hosts.Hosts {
		script := `v="virsh -q -c qemu:///system"; p="^bf-` + p.name + `-"
for d in $($v list --all --name | grep "$p"); do $v undefine "$d" >/dev/null 2>&1; $v destroy "$d" >/dev/null 2>&1; done
for x in $($v vol-list bigfleet | awk '{print $1}' | grep "$p"); do $v vol-delete --pool bigfleet "$x" >/dev/null 2>&1; done; true`
		if out, err := exec.Command(e.Script, "exec", h.Name, "sh", "-c", script).CombinedOutput(); err != nil {
			t.Logf("sweep %s: %v\n%s", h.Name, err, out)
		}
	}
}

// host is the admin view of the named host (nil when absent or on error).
func (p *labProvider) host(t *testing.T, name string) *adminv1.Host {
	t.Helper()
	return hostView(t, p.conn, name)
}

// awaitHost waits until the host's connected flag is as wanted and says how long it took.
func (p *labProvider) awaitHost(t *testing.T, name string, connected bool) time.Duration {
	t.Helper()
	return awaitHostView(t, p.conn, name, connected)
}

func labJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := json.MarshalIndent(v, "", "  ")
	must(t, err)
	must(t, os.WriteFile(path, raw, 0o644))
}

// refHost and refDomain are the host and domain parts of a machine's
// zone/host/domain ref ("" when it has none).
func refHost(m *pb.Machine) string { return refPart(m, 1) }

func refDomain(m *pb.Machine) string { return refPart(m, 2) }

func refPart(m *pb.Machine, i int) string {
	parts := strings.Split(m.GetHost().GetRef(), "/")
	if len(parts) != 3 {
		return ""
	}
	return parts[i]
}

// createIdle Creates the machines at once, waits until each is IDLE, and
// returns their domains, in order.
func (p *labProvider) createIdle(t *testing.T, ids ...string) []string {
	t.Helper()
	for _, id := range ids {
		p.mutate(t, "Create", &pb.CreateRequest{MachineId: id})
	}
	doms := make([]string, len(ids))
	for i, id := range ids {
		doms[i] = refDomain(p.await(t, id, 3*time.Minute, pb.MachineState_MACHINE_STATE_IDLE))
	}
	return doms
}
