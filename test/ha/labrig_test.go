//go:build ha

package ha

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/internal/labenv"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
	"github.com/bigfleet/libvirt-provider/internal/testpki"
)

// The failover on the lab's hosts (make test-ha-lab, docs/ha.md): two
// bin/libvirt with --leader-elect against a real apiserver serve one zone
// of two lab hosts, lab1 (libvirt 9.0) and lab3 (11.3), both qemu+tls. A
// domain first defined on lab1 migrates both ways; one defined on lab3 is
// refused lab1 (its machine type), so only lab1-born machines migrate.

// labTiming is a short lease; a libvirt call's bound fits the 1 s margin
// with 0.5 s left to exit. The renew deadline is what a quiet leader
// leaves libvirt to unwind what it started (docs/ha.md, "Quiet"): a live
// migration aborted before its destination's prepare phase took up to
// 2.6 s to unwind on these TCG hosts, so 4 s rather than the 3 s of
// test-ha's fake backend.
var labTiming = timing{"lab 5s/4s/0.5s", 5 * time.Second, 4 * time.Second, 500 * time.Millisecond, "500ms"}

const (
	labName  = "halab" // --provider: the domains are bf-halab-*
	labType  = "halab.tiny"
	labShard = "ha-lab"
	labSlots = 4
	// labGrace: an operation still transitional its timeout plus this
	// long after the takeover is stuck.
	labGrace = 30 * time.Second
	// labSettle: how long the hosts may disagree with the books after the
	// operations ended (a reconcile pass removing a stale copy).
	labSettle = 30 * time.Second
)

var labZoneHosts = []string{"lab1", "lab3"}

// labTimeouts are the provider's per-transition timeouts.
var labTimeouts = map[string]time.Duration{"Create": 3 * time.Minute, "Configure": 2 * time.Minute,
	"Drain": 2 * time.Minute, "Delete": 2 * time.Minute, "Migrate": time.Minute, "Release": 2 * time.Minute}

const (
	stSpec       = pb.MachineState_MACHINE_STATE_SPECULATIVE
	stIdle       = pb.MachineState_MACHINE_STATE_IDLE
	stConfigured = pb.MachineState_MACHINE_STATE_CONFIGURED
	stFailed     = pb.MachineState_MACHINE_STATE_FAILED
)

type labHostEntry struct {
	Name   string            `json:"name"`
	Zone   string            `json:"zone"`
	URI    string            `json:"uri"`
	Labels map[string]string `json:"labels,omitempty"`
	// Overcommit: a lab host has 2 CPUs; every machine must fit on either
	// host, so that a migration always has room.
	Overcommit map[string]float64 `json:"overcommit,omitempty"`
}

// labMachine is what the test, as BigFleet, knows of one machine.
type labMachine struct {
	id, dom    string
	born       string          // the host its domain was first defined on
	configured bool            // a Configure reached CONFIGURED in this life
	migratedIn pb.MachineState // the state it was last migrated in, this life
	tok        int64           // the newest token the provider accepted for it
	last       *labOp          // its last acknowledged lifecycle operation
	bind       *soakkit.Binding
}

// labOp is one operation sent to the leader.
type labOp struct {
	kind   string
	m      *labMachine
	build  func(seq int64) proto.Message
	from   pb.MachineState
	target pb.MachineState
	bind   soakkit.Binding
	to     string // Migrate's destination
	opID   string
	sent   time.Time
	done   time.Time // when the test saw it end before the kill
	cut    bool      // still running at the kill
	call   chan error
	answer error // Migrate's answer, once await read it
	out    string
}

// labRig is the lab, a real apiserver, the two providers and the client.
type labRig struct {
	t        *testing.T
	env      labenv.Env
	k        *kube
	lease    string // the Lease's name
	a, b     *provider
	leader   *provider
	tlsCfg   *tls.Config
	seed     uint64
	draws    *soakkit.Draws
	ms       []*labMachine
	byID     map[string]*labMachine
	est      map[string]time.Duration // each kind's duration, for the kill's draw
	cuts     map[string]int           // ops cut by a kill, by kind
	outcomes map[string]int           // "kind cut|uncut outcome" → count
	nviol    int
}

func loadLabEnv(t *testing.T) labenv.Env {
	e, err := labenv.Load()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no lab (%v): make test-ha-lab brings it up", err)
		}
		t.Skipf("no lab (%v): run make test-ha-lab, which runs scripts/lab.sh up", err)
	}
	return e
}

// zoneHosts reads the lab's one-zone hosts file and keeps lab1 and lab3.
func zoneHosts(t *testing.T, e labenv.Env) []labHostEntry {
	raw, err := os.ReadFile(e.HostsZone)
	if err != nil {
		t.Fatal(err)
	}
	var out []labHostEntry
	var cur *labHostEntry
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "- name: "):
			out = append(out, labHostEntry{Name: strings.TrimPrefix(line, "- name: ")})
			cur = &out[len(out)-1]
		case cur != nil && strings.HasPrefix(line, "zone: "):
			cur.Zone = strings.TrimPrefix(line, "zone: ")
		case cur != nil && strings.HasPrefix(line, "uri: "):
			cur.URI = strings.Trim(strings.TrimPrefix(line, "uri: "), `"`)
		}
	}
	var hs []labHostEntry
	for _, h := range out {
		if slices.Contains(labZoneHosts, h.Name) {
			h.Overcommit = map[string]float64{"cpu": labSlots}
			hs = append(hs, h)
		}
	}
	if len(hs) != len(labZoneHosts) {
		t.Fatalf("%s holds %v, want %v: scripts/lab.sh up 3", e.HostsZone, hs, labZoneHosts)
	}
	return hs
}

func writeJSONFile(t *testing.T, path string, v any) {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// labSeed is HA_LAB_SEED, else the clock.
func labSeed() uint64 {
	if s, err := strconv.ParseUint(os.Getenv("HA_LAB_SEED"), 10, 64); err == nil {
		return s
	}
	return uint64(time.Now().UnixNano())
}

// newLabRig brings up an apiserver and the two providers on the lab's
// zone; the hosts are swept of the test's domains before and after.
func newLabRig(t *testing.T, lease string) *labRig {
	e := loadLabEnv(t)
	hosts := zoneHosts(t, e)
	r := &labRig{t: t, env: e, lease: lease, seed: labSeed(), byID: map[string]*labMachine{},
		est: map[string]time.Duration{"Create": 15 * time.Second, "Configure": 4 * time.Second,
			"Drain": 4 * time.Second, "Delete": 2 * time.Second, "Migrate": 6 * time.Second},
		cuts: map[string]int{}, outcomes: map[string]int{}}
	r.draws = soakkit.NewDraws(r.seed, 41)
	t.Logf("seed %d (HA_LAB_SEED=%d replays the draws)", r.seed, r.seed)
	for _, h := range labZoneHosts {
		r.sweep(h)
	}
	r.k = startKube(t)
	dir := t.TempDir()
	hostsPath, types, offers := filepath.Join(dir, "hosts.yaml"), filepath.Join(dir, "types.json"), filepath.Join(dir, "offerings.json")
	writeJSONFile(t, hostsPath, map[string]any{"hosts": hosts})
	writeJSONFile(t, types, []map[string]any{{"name": labType, "vcpu": 1, "memory_mib": 256}})
	writeJSONFile(t, offers, []map[string]any{{"instance_type": labType, "zone": "lab", "capacity_type": "on_demand", "count": labSlots}})
	tlsFlags, cfg, err := testpki.AdminMTLS(dir, "halab-admin")
	if err != nil {
		t.Fatal(err)
	}
	r.tlsCfg = cfg
	backend := []string{"--provider=" + labName, "--hosts=" + hostsPath, "--instance-types=" + types,
		"--offerings=" + offers, "--reconcile-interval=2s", "--log-level=info",
		"--create-timeout=" + labTimeouts["Create"].String(), "--configure-timeout=" + labTimeouts["Configure"].String(),
		"--drain-timeout=" + labTimeouts["Drain"].String(), "--delete-timeout=" + labTimeouts["Delete"].String(),
		"--migrate-timeout=" + labTimeouts["Migrate"].String()}
	backend = append(append(backend, e.Args...), tlsFlags...)
	var env []string
	if lib := os.Getenv("BIGFLEET_LIBVIRT_CLIENT"); lib != "" {
		env = []string{"LD_LIBRARY_PATH=" + lib}
	}
	r.a = r.labProvider("pod-a", lease, env, backend)
	r.b = r.labProvider("pod-b", lease, env, backend)
	// Last cleanup registered runs first: the providers go before the
	// sweep (a running leader would start an IDLE machine again).
	t.Cleanup(func() {
		for _, h := range labZoneHosts {
			r.sweep(h)
		}
	})
	t.Cleanup(func() {
		r.a.kill()
		r.b.kill()
		if t.Failed() {
			_ = os.MkdirAll(filepath.Join(root, "out"), 0o755)
			for _, p := range []*provider{r.a, r.b} {
				if b, err := os.ReadFile(p.logFile); err == nil {
					keep := filepath.Join(root, "out", "test-ha-lab-"+t.Name()+"-"+p.name+".log")
					_ = os.WriteFile(keep, b, 0o644)
					t.Logf("%s's log kept in %s", p.name, keep)
				}
			}
		}
	})
	r.a.start(t)
	r.b.start(t)
	r.leader, _ = waitLeader(t, labTiming.lease+labTiming.bound(), r.a, r.b)
	r.loadMachines()
	return r
}

// labProvider is a candidate on the lab, reached over mTLS as the admin
// client (the admin API's writes: MigrateMachine, ReleaseMachine).
func (r *labRig) labProvider(name, lease string, env, backend []string) *provider {
	// Clipped: newProviderOn appends to it, and the two candidates must
	// not share one array.
	p := newProviderOn(r.t, r.k, name, lease, labTiming, slices.Clip(backend)...)
	p.env = env
	_ = p.conn.Close()
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(credentials.NewTLS(r.tlsCfg)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond}}))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = conn.Close() })
	p.conn = conn
	return p
}

func (r *labRig) loadMachines() {
	res, err := r.leader.list(r.t.Context())
	if err != nil {
		r.t.Fatal(err)
	}
	for _, m := range res.GetMachines() {
		if m.GetInstanceType() != labType {
			continue
		}
		lm := &labMachine{id: m.GetId(), dom: meta.DomainName(labName, m.GetId())}
		r.ms = append(r.ms, lm)
		r.byID[lm.id] = lm
	}
	if len(r.ms) != labSlots {
		r.t.Fatalf("the leader offers %d %s slots, want %d", len(r.ms), labType, labSlots)
	}
}

// violate records a broken rule: the test fails, the run goes on.
func (r *labRig) violate(k int, format string, args ...any) {
	r.nviol++
	r.t.Errorf("kill %d: VIOLATION: "+format, append([]any{k}, args...)...)
}

// machines is the leader's List of the test's machines.
func (r *labRig) machines(p *provider) (map[string]*pb.Machine, error) {
	res, err := p.list(r.t.Context())
	if err != nil {
		return nil, err
	}
	out := map[string]*pb.Machine{}
	for _, m := range res.GetMachines() {
		if r.byID[m.GetId()] != nil {
			out[m.GetId()] = m
		}
	}
	return out, nil
}

func (r *labRig) invoke(p *provider, method string, req, res proto.Message) error {
	ctx, cancel := context.WithTimeout(r.t.Context(), 5*time.Second)
	defer cancel()
	return p.conn.Invoke(ctx, method, req, res)
}

// refHost is the host a machine's HostRef names (zone/host/domain).
func refHost(m *pb.Machine) string {
	parts := strings.Split(m.GetHost().GetRef(), "/")
	if len(parts) != 3 {
		return ""
	}
	return parts[1]
}

func otherHost(h string) string {
	if h == labZoneHosts[0] {
		return labZoneHosts[1]
	}
	return labZoneHosts[0]
}

// sweep removes the test's domains and volumes from a host, whatever left
// them.
func (r *labRig) sweep(host string) {
	prefix := meta.NamePrefix(labName)
	script := `v="virsh -q -c qemu:///system"; p="^` + prefix + `"
for d in $($v list --all --name | grep "$p"); do $v destroy "$d" >/dev/null 2>&1; $v undefine "$d" --nvram >/dev/null 2>&1 || $v undefine "$d" >/dev/null 2>&1; done
for x in $($v vol-list bigfleet | awk '{print $1}' | grep "$p"); do $v vol-delete --pool bigfleet "$x" >/dev/null 2>&1; done; true`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_ = exec.CommandContext(ctx, r.env.Script, "exec", host, "sh", "-c", script).Run()
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// readyz is the body of p's /readyz (why it is not ready).
func readyz(p *provider) string {
	c := http.Client{Timeout: time.Second}
	res, err := c.Get("http://" + p.metrics + "/readyz")
	if err != nil {
		return err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 2000))
	return strings.TrimSpace(string(b))
}
