//go:build ha

package ha

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/internal/labenv"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
	"github.com/bigfleet/libvirt-provider/internal/testpki"
)

// The failover on the lab's hosts (make test-ha-lab, docs/ha.md): two
// bin/libvirt with --leader-elect against a real apiserver serve one zone
// of two lab hosts, lab1 (libvirt 9.0) and lab3 (11.3), both qemu+tls. A
// domain first defined on lab1 migrates both ways; one defined on lab3 is
// refused lab1 (its machine type), so only lab1-born machines migrate.

// labTiming is the short lease; a libvirt call's bound fits the 1 s
// margin with 0.5 s left to exit.
var labTiming = timing{"lab 4s/3s/0.5s", 4 * time.Second, 3 * time.Second, 500 * time.Millisecond, "500ms"}

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
	out    string
}

// labRig is the lab, a real apiserver, the two providers and the client.
type labRig struct {
	t        *testing.T
	env      labenv.Env
	k        *kube
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
	r := &labRig{t: t, env: e, seed: labSeed(), byID: map[string]*labMachine{},
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

// nextOp is the machine's next step in its life: Create, Configure,
// Drain, Delete, with a live migration at IDLE or CONFIGURED for a
// lab1-born machine (at random), and ReleaseMachine for a FAILED one.
func (r *labRig) nextOp(lm *labMachine, m *pb.Machine) *labOp {
	switch st := m.GetState(); st {
	case stSpec:
		return r.opOf(lm, m, "Create")
	case stIdle, stConfigured:
		return r.opOf(lm, m, r.pick(lm, st))
	case stFailed:
		return r.opOf(lm, m, "Release")
	}
	return nil // transitional: not settled yet
}

// opOf builds the operation kind on the machine as it is.
func (r *labRig) opOf(lm *labMachine, m *pb.Machine, kind string) *labOp {
	st := m.GetState()
	op := &labOp{m: lm, from: st, kind: kind}
	switch kind {
	case "Create":
		op.target = stIdle
	case "Migrate":
		op.target, op.to = st, otherHost(refHost(m))
		return op
	case "Configure":
		op.target = stConfigured
		n, blob := r.draws.Configure(512, nil)
		op.bind = soakkit.Binding{Cluster: fmt.Sprintf("c-halab-%d", n), Meta: map[string]string{"bigfleet.io/n": strconv.Itoa(n)}}
		op.build = soakkit.Request(labShard, 1, lm.id, "Configure", op.bind, blob, 0)
		return op
	case "Drain":
		op.target = stIdle
	case "Delete", "Release":
		op.target = stSpec
		if kind == "Release" {
			return op
		}
	}
	op.build = soakkit.Request(labShard, 1, lm.id, op.kind, soakkit.Binding{}, nil, 2)
	return op
}

// canStart says whether kind can start on the machine as it is.
func canStart(lm *labMachine, m *pb.Machine, kind string) bool {
	switch st := m.GetState(); kind {
	case "Create":
		return st == stSpec
	case "Configure", "Delete":
		return st == stIdle
	case "Drain":
		return st == stConfigured
	case "Migrate":
		return lm.born == labZoneHosts[0] && (st == stIdle || st == stConfigured)
	}
	return false
}

// stepToward is the uncut operation that brings the machine one step
// nearer to where kind can start.
func (r *labRig) stepToward(lm *labMachine, m *pb.Machine, kind string) *labOp {
	switch st := m.GetState(); {
	case st == stFailed:
		return r.opOf(lm, m, "Release")
	case st == stSpec:
		return r.opOf(lm, m, "Create")
	case st == stConfigured:
		return r.opOf(lm, m, "Drain")
	case st == stIdle && kind == "Drain":
		return r.opOf(lm, m, "Configure")
	case st == stIdle:
		return r.opOf(lm, m, "Delete")
	}
	return nil
}

// prepare brings a machine, without a kill, to where kind can start and
// returns it; nil when none can be (a migration needs a lab1-born
// machine, which only placement makes).
func (r *labRig) prepare(k int, kind string) *labMachine {
	ms := r.settled(k)
	for _, lm := range r.ms {
		if canStart(lm, ms[lm.id], kind) {
			return lm
		}
	}
	if kind == "Migrate" {
		return nil
	}
	lm := r.ms[int(r.draws.Float()*float64(len(r.ms)))]
	for range 5 {
		ms = r.settled(k)
		if canStart(lm, ms[lm.id], kind) {
			return lm
		}
		op := r.stepToward(lm, ms[lm.id], kind)
		if op == nil {
			return nil
		}
		if err := r.send(op); err != nil {
			r.violate(k, "preparing %s: %s of %s refused: %v", kind, op.kind, lm.id, err)
			return nil
		}
		r.await(k, op, time.Now())
	}
	return nil
}

// primary is this kill's kind and machine: the kind cut least so far that
// a machine can be brought to.
func (r *labRig) primary(k int) (string, *labMachine) {
	kinds := slices.Clone(labKinds)
	slices.SortStableFunc(kinds, func(a, b string) int { return r.cuts[a] - r.cuts[b] })
	for _, kind := range kinds {
		if lm := r.prepare(k, kind); lm != nil {
			return kind, lm
		}
	}
	r.t.Fatalf("kill %d: no machine can be brought to any operation", k)
	return "", nil
}

var labKinds = []string{"Create", "Configure", "Drain", "Delete", "Migrate"}

// pick is an IDLE or CONFIGURED machine's next kind: its life's order
// (Configure, then Drain, then Delete), a migration at random for a
// lab1-born machine, unless another kind open to it has been cut fewer
// times (so that a kind whose cuts keep failing, like a Configure lost
// to each failover, does not starve the others).
func (r *labRig) pick(lm *labMachine, st pb.MachineState) string {
	opts := []string{"Delete", "Configure"}
	switch {
	case st == stConfigured:
		opts = []string{"Drain"}
	case !lm.configured:
		opts = []string{"Configure", "Delete"}
	}
	kind := opts[0]
	for _, o := range opts[1:] {
		if r.cuts[o] < r.cuts[kind] {
			kind = o
		}
	}
	if lm.born == labZoneHosts[0] && lm.migratedIn != st &&
		(r.cuts["Migrate"] < r.cuts[kind] || (r.cuts["Migrate"] == r.cuts[kind] && r.draws.Float() < 0.5)) {
		kind = "Migrate"
	}
	return kind
}

// send starts op on the leader: a lifecycle call is acknowledged at once;
// a migration runs in the background until it answers.
func (r *labRig) send(op *labOp) error {
	op.sent = time.Now()
	lm := op.m
	switch op.kind {
	case "Migrate":
		op.call = make(chan error, 1)
		conn := r.leader.conn
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), labTimeouts["Migrate"]+30*time.Second)
			defer cancel()
			var res adminv1.MigrateMachineResponse
			op.call <- conn.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/MigrateMachine",
				&adminv1.MigrateMachineRequest{Id: lm.id, ToHost: op.to}, &res)
		}()
		lm.migratedIn = op.from
		return nil
	case "Release":
		var res adminv1.ReleaseMachineResponse
		return r.invoke(r.leader, "/libvirtprovider.admin.v1.AdminService/ReleaseMachine", &adminv1.ReleaseMachineRequest{Id: lm.id}, &res)
	}
	seq := r.draws.Next()
	var ack pb.TransitionAck
	if err := r.invoke(r.leader, method+op.kind, op.build(seq), &ack); err != nil {
		return err
	}
	op.opID, lm.tok, lm.last = ack.GetOperationId(), seq, op
	switch op.kind {
	case "Create":
		lm.configured, lm.migratedIn, lm.born = false, 0, ""
	case "Drain":
		lm.bind = nil // unbound from here on: not a lost binding
	}
	return nil
}

// round is one kill: every settled machine gets its next operation, the
// leader is SIGKILLed at a seeded random point of one of them (of the kind
// cut least so far), the standby must serve within the bound, the killed
// process comes back as the standby, and then every operation, fence mark,
// binding and the hosts' own domain lists are judged.
type round struct {
	k        int
	primary  *labOp
	delay    time.Duration
	failover time.Duration
	from, to string
	ops      []*labOp
	viol     int
}

func (r *labRig) round(k int) round {
	t := r.t
	rd := round{k: k}
	standby := other(r.leader, r.a, r.b)
	if !waitReady(standby, r.leader, 30*time.Second) {
		r.violate(k, "leader %s not ready (/readyz %q) or standby %s not naming it (%v) 30 s after the last failover",
			r.leader.name, readyz(r.leader), standby.name, func() error { _, err := standby.list(t.Context()); return err }())
	}
	checkStandby(t, standby, r.leader)
	kind, chosen := r.primary(k)
	before := r.settled(k)
	for _, lm := range r.ms {
		op := r.nextOp(lm, before[lm.id])
		if lm == chosen {
			op = r.opOf(lm, before[lm.id], kind)
		}
		if op == nil {
			continue
		}
		if err := r.send(op); err != nil {
			r.violate(k, "%s of %s (%s) refused by the settled leader: %v", op.kind, lm.id, op.from, err)
			continue
		}
		rd.ops = append(rd.ops, op)
		if lm == chosen {
			rd.primary = op
		}
	}
	if rd.primary == nil {
		t.Fatalf("kill %d: the %s of %s was refused: nothing to cut", k, kind, chosen.id)
	}
	rd.delay = r.draws.Between(0, r.est[rd.primary.kind])
	r.watchUntil(rd.ops, rd.primary.sent.Add(rd.delay), false)
	r.markCut(rd.ops)
	old := r.leader
	rd.from, rd.to = old.name, standby.name
	killedAt := time.Now()
	_ = old.cmd.Process.Signal(syscall.SIGKILL)
	<-old.done
	got, _ := waitLeader(t, 2*labTiming.bound(), standby)
	rd.failover = time.Since(killedAt)
	if got != standby {
		t.Fatalf("kill %d: %s served, not the standby", k, got.name)
	}
	if rd.failover > labTiming.bound() {
		r.violate(k, "standby served %s after the kill; want within lease + 2×retry + 1s = %s", rd.failover.Round(time.Millisecond), labTiming.bound())
	}
	r.leader = standby
	old.start(t) // back, as the standby
	n0 := r.nviol
	for _, op := range rd.ops {
		r.await(k, op, killedAt)
	}
	r.checkBindings(k, rd.ops)
	r.checkFences(k)
	r.checkHosts(k)
	rd.viol = r.nviol - n0
	return rd
}

// warm runs rounds without a kill (at most 5) until each kind's duration
// on these hosts has been measured once, so that the kills' draws span
// each operation whole (a migration here copies the whole disk: the hosts'
// golden images differ).
func (r *labRig) warm(t *testing.T) {
	seen := map[string]bool{}
	for w := 0; w < 5 && len(seen) < 5; w++ {
		before := r.settled(0)
		var ops []*labOp
		for _, lm := range r.ms {
			if op := r.nextOp(lm, before[lm.id]); op != nil {
				if err := r.send(op); err != nil {
					t.Fatalf("warm-up: %s of %s: %v", op.kind, lm.id, err)
				}
				ops = append(ops, op)
			}
		}
		r.watchUntil(ops, time.Now().Add(labTimeouts["Create"]), true)
		for _, op := range ops {
			if !op.done.IsZero() && op.kind != "Release" {
				r.est[op.kind], seen[op.kind] = op.done.Sub(op.sent), true
			}
			r.await(0, op, time.Now())
		}
		r.checkHosts(0)
	}
	t.Logf("warm-up: durations measured %v", r.est)
}

// settled waits (bounded) until no machine is transitional and returns
// them.
func (r *labRig) settled(k int) map[string]*pb.Machine {
	deadline := time.Now().Add(labTimeouts["Create"] + labGrace)
	for {
		ms, err := r.machines(r.leader)
		if err == nil && !slices.ContainsFunc(slices.Collect(maps.Values(ms)), func(m *pb.Machine) bool { return soakkit.Transitional(m.GetState()) }) {
			return ms
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("kill %d: machines not settled within %s: %v %v", k, labTimeouts["Create"]+labGrace, ms, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// watchUntil polls the leader until the kill's time (or, with all, until
// every op ended), noting when each operation ends (for the duration
// estimates).
func (r *labRig) watchUntil(ops []*labOp, until time.Time, all bool) {
	for time.Now().Before(until) {
		if all && !slices.ContainsFunc(ops, func(op *labOp) bool { return op.done.IsZero() }) {
			return
		}
		ms, err := r.machines(r.leader)
		now := time.Now()
		for _, op := range ops {
			if !op.done.IsZero() {
				continue
			}
			if op.kind == "Migrate" {
				select {
				case err := <-op.call:
					op.call <- err // for await
					op.done = now
				default:
				}
				continue
			}
			if m := ms[op.m.id]; err == nil && m != nil && !soakkit.Transitional(m.GetState()) {
				op.done = now
			}
		}
		time.Sleep(min(100*time.Millisecond, time.Until(until)))
	}
}

// markCut: an op is cut when it had not ended at the kill.
func (r *labRig) markCut(ops []*labOp) {
	for _, op := range ops {
		if op.done.IsZero() && op.kind != "Release" {
			op.cut = true
			r.cuts[op.kind]++
		}
		if !op.done.IsZero() && op.kind != "Release" {
			// Learn how long this kind takes, for the next draws.
			r.est[op.kind] = (r.est[op.kind] + op.done.Sub(op.sent)) / 2
		}
	}
}

// await waits for op's end on the new leader and judges it by the issue's
// rules: it finishes, or a cut Configure rolls back to IDLE, or it is
// FAILED with a cause; a migration leaves the machine in its state, on one
// host. Never transitional past its timeout + labGrace after the takeover.
func (r *labRig) await(k int, op *labOp, killedAt time.Time) {
	lm := op.m
	if op.kind == "Migrate" {
		select {
		case err := <-op.call:
			if err != nil && !op.cut {
				r.t.Logf("kill %d: Migrate %s → %s answered %v", k, lm.id, op.to, err)
			}
		case <-time.After(labTimeouts["Migrate"] + labGrace):
			r.violate(k, "MigrateMachine %s → %s unanswered %s after the kill", lm.id, op.to, labTimeouts["Migrate"]+labGrace)
		}
	}
	deadline := later(op.sent, killedAt).Add(labTimeouts[op.kind] + labGrace)
	var m *pb.Machine
	for {
		var res pb.Machine
		err := r.invoke(r.leader, method+"Get", &pb.MachineRef{Id: lm.id}, &res)
		if err == nil && !soakkit.Transitional(res.GetState()) {
			m = &res
			break
		}
		if time.Now().After(deadline) {
			r.violate(k, "%s of %s (op %q, cut %v) stuck: %s %s after it was sent or taken over (bound: timeout %s + %s)",
				op.kind, lm.id, op.opID, op.cut, res.GetState(), time.Since(later(op.sent, killedAt)).Round(time.Second), labTimeouts[op.kind], labGrace)
			op.out = "stuck"
			r.count(op)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	op.out = r.judge(k, op, m)
	r.count(op)
}

func (r *labRig) count(op *labOp) {
	cut := "uncut"
	if op.cut {
		cut = "cut"
	}
	r.outcomes[op.kind+" "+cut+" "+op.out]++
}

func (r *labRig) judge(k int, op *labOp, m *pb.Machine) string {
	lm, st := op.m, m.GetState()
	if st == stFailed && m.GetLastError() == "" {
		r.violate(k, "%s of %s: FAILED with no cause in last_error", op.kind, lm.id)
	}
	switch {
	case op.kind == "Migrate":
		if st != op.from {
			r.violate(k, "Migrate of %s (cut %v) changed its state %s → %s (%s); a migration never does", lm.id, op.cut, op.from, st, m.GetLastError())
			return "state changed"
		}
		if refHost(m) == op.to {
			return "moved"
		}
		return "stayed"
	case st == op.target:
		if op.kind == "Configure" {
			if m.GetCluster() != op.bind.Cluster || !maps.Equal(m.GetShardMetadata(), op.bind.Meta) {
				r.violate(k, "Configure of %s ended CONFIGURED with cluster %q metadata %v, want %q %v", lm.id, m.GetCluster(), m.GetShardMetadata(), op.bind.Cluster, op.bind.Meta)
			}
			b := op.bind
			lm.bind, lm.configured = &b, true
		}
		if op.kind == "Create" || lm.born == "" {
			lm.born = refHost(m)
		}
		return "reached"
	case st == stFailed:
		if op.kind == "Configure" && op.cut && !soakkit.CutConfigureFailed(m.GetLastError()) {
			r.violate(k, "cut Configure of %s FAILED with %q: not a cause the guest gives (its hook failed, or cannot tell)", lm.id, m.GetLastError())
		}
		r.t.Logf("kill %d: %s of %s (cut %v) FAILED: %s", k, op.kind, lm.id, op.cut, m.GetLastError())
		return "FAILED with cause"
	case op.kind == "Configure" && op.cut && st == stIdle:
		if !soakkit.CutConfigureRolledBack(m) {
			r.violate(k, "cut Configure of %s (op %q) back at IDLE with no rollback cause (last_error %q): an accepted Configure lost",
				lm.id, op.opID, m.GetLastError())
			return "lost (IDLE, no cause)"
		}
		return "rolled back"
	}
	r.violate(k, "%s of %s acknowledged by the old leader (op %q, cut %v) ended %s (%q); want %s or FAILED with a cause: an accepted operation lost",
		op.kind, lm.id, op.opID, op.cut, st, m.GetLastError(), op.target)
	return "lost (" + strings.TrimPrefix(st.String(), "MACHINE_STATE_") + ")"
}

// checkBindings: every machine BigFleet saw CONFIGURED and has not
// drained since is still CONFIGURED in the same cluster, with the same
// shard metadata, after the failover.
func (r *labRig) checkBindings(k int, ops []*labOp) {
	ms, err := r.machines(r.leader)
	if err != nil {
		r.violate(k, "List after the failover: %v", err)
		return
	}
	for _, lm := range r.ms {
		if lm.bind == nil {
			continue
		}
		m := ms[lm.id]
		if m.GetState() != stConfigured || m.GetCluster() != lm.bind.Cluster || !maps.Equal(m.GetShardMetadata(), lm.bind.Meta) {
			r.violate(k, "lost binding: %s was CONFIGURED in %q %v and is %s in %q %v (%s)", lm.id, lm.bind.Cluster, lm.bind.Meta,
				m.GetState(), m.GetCluster(), m.GetShardMetadata(), m.GetLastError())
		}
	}
}

// checkFences runs the conformance fencing checks against the new leader
// for every machine the test has sent a token for: the last accepted
// token again is stale (FailedPrecondition, before any idempotent
// short-circuit); a newer token replaying an operation that reached its
// target is accepted and answered with the same operation id the old
// leader gave; on a FAILED machine a newer token passes the fence and is
// Aborted (a mutation on FAILED). Marks of machines without a domain are
// checked as well as the others (the rule).
func (r *labRig) checkFences(k int) {
	ms, err := r.machines(r.leader)
	if err != nil {
		r.violate(k, "List for the fence checks: %v", err)
		return
	}
	for _, lm := range r.ms {
		op := lm.last
		if op == nil {
			continue
		}
		m := ms[lm.id]
		var ack pb.TransitionAck
		err := r.invoke(r.leader, method+op.kind, op.build(lm.tok), &ack)
		if status.Code(err) != codes.FailedPrecondition {
			r.violate(k, "stale token (%s, 1, %d) replaying %s on %s (%s, has a domain: %v) answered %v (op %q); want FailedPrecondition: the fence mark did not hold across the failover",
				labShard, lm.tok, op.kind, lm.id, m.GetState(), soakkit.HasVM(m.GetState()), err, ack.GetOperationId())
		}
		switch {
		case m.GetState() == op.target && op.out == "reached":
			seq := r.draws.Next()
			ack.Reset()
			err := r.invoke(r.leader, method+op.kind, op.build(seq), &ack)
			if err != nil || ack.GetOperationId() != op.opID {
				r.violate(k, "replay of %s on %s (%s) with a newer token answered %v, op %q; want OK with the old leader's op %q",
					op.kind, lm.id, m.GetState(), err, ack.GetOperationId(), op.opID)
			}
			if status.Code(err) != codes.FailedPrecondition {
				lm.tok = seq
			}
		case m.GetState() == stFailed:
			seq := r.draws.Next()
			err := r.invoke(r.leader, method+op.kind, op.build(seq), &ack)
			if status.Code(err) != codes.Aborted {
				r.violate(k, "newer token on FAILED %s (%s) answered %v; want Aborted (past the fence)", lm.id, op.kind, err)
			}
			if status.Code(err) != codes.FailedPrecondition {
				lm.tok = seq
			}
		}
	}
}

// hostDomains is each lab host's own list of the test's domains (virsh
// as root inside the host): domain → state.
func (r *labRig) hostDomains() (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, h := range labZoneHosts {
		ctx, cancel := context.WithTimeout(r.t.Context(), 30*time.Second)
		raw, err := exec.CommandContext(ctx, r.env.Script, "exec", h, "virsh", "-q", "-c", "qemu:///system", "list", "--all").CombinedOutput()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("virsh list on %s: %v: %s", h, err, raw)
		}
		out[h] = map[string]string{}
		for _, line := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && strings.HasPrefix(f[1], meta.NamePrefix(labName)) {
				out[h][f[1]] = strings.Join(f[2:], " ")
			}
		}
	}
	return out, nil
}

// hostProblems compares the hosts with the leader's books: one domain per
// machine that has a VM, on the host its ref names and running; none for
// a free slot; no domain of no machine. twice lists the machines running
// on both hosts at once (never allowed, not even for a moment).
func (r *labRig) hostProblems() (problems, twice []string, err error) {
	hd, err := r.hostDomains()
	if err != nil {
		return nil, nil, err
	}
	ms, err := r.machines(r.leader)
	if err != nil {
		return nil, nil, err
	}
	known := map[string]bool{}
	for _, lm := range r.ms {
		known[lm.dom] = true
		m := ms[lm.id]
		var on, running []string
		for _, h := range labZoneHosts {
			if st, ok := hd[h][lm.dom]; ok {
				on = append(on, h+"("+st+")")
				if st == "running" {
					running = append(running, h)
				}
			}
		}
		if len(running) > 1 {
			twice = append(twice, fmt.Sprintf("%s runs on %v at once", lm.id, running))
		}
		switch st := m.GetState(); {
		case len(on) > 1:
			problems = append(problems, fmt.Sprintf("%s (%s) has a domain on two hosts: %v", lm.id, st, on))
		case st == stSpec && len(on) > 0:
			problems = append(problems, fmt.Sprintf("free slot %s has a domain: %v", lm.id, on))
		case (st == stIdle || st == stConfigured) && (len(running) != 1 || running[0] != refHost(m)):
			problems = append(problems, fmt.Sprintf("%s is %s on %q by the books; the hosts hold %v", lm.id, st, refHost(m), on))
		}
	}
	for h, doms := range hd {
		for d := range doms {
			if !known[d] {
				problems = append(problems, fmt.Sprintf("%s holds %s, no machine's domain", h, d))
			}
		}
	}
	return problems, twice, nil
}

// checkHosts: no machine runs twice at any look; the books and the hosts
// agree within labSettle.
func (r *labRig) checkHosts(k int) {
	deadline := time.Now().Add(labSettle)
	for {
		problems, twice, err := r.hostProblems()
		for _, s := range twice {
			r.violate(k, "duplicate: %s", s)
		}
		if err == nil && len(problems) == 0 {
			return
		}
		if time.Now().After(deadline) {
			if err != nil {
				r.violate(k, "hosts not listed: %v", err)
			}
			for _, p := range problems {
				r.violate(k, "hosts vs books after %s: %s", labSettle, p)
			}
			return
		}
		time.Sleep(2 * time.Second)
	}
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

// TestLabFailover (make test-ha-lab): HA_LAB_KILLS SIGKILLs of the leader
// (20 by default) at seeded random points of Create, Configure, Drain,
// Delete and Migrate on the lab's hosts, each judged by round; prints a
// line per kill and the figures, kept in out/test-ha-lab.txt.
func TestLabFailover(t *testing.T) {
	t0 := time.Now()
	kills := 20
	if n, err := strconv.Atoi(os.Getenv("HA_LAB_KILLS")); err == nil && n > 0 {
		kills = n
	}
	r := newLabRig(t, "lab-failover")
	var lines []string
	var times []time.Duration
	logLine := func(s string) {
		t.Log(s)
		lines = append(lines, s)
	}
	logLine(fmt.Sprintf("seed %d, %s, %d kills, zone %v, %d machines", r.seed, labTiming.name, kills, labZoneHosts, labSlots))
	r.warm(t)
	for k := 1; k <= kills; k++ {
		rd := r.round(k)
		times = append(times, rd.failover)
		var ops []string
		for _, op := range rd.ops {
			mark := ""
			if op.cut {
				mark = "*"
			}
			ops = append(ops, fmt.Sprintf("%s%s %s→%s", op.kind, mark, op.m.id, op.out))
		}
		logLine(fmt.Sprintf("KILL %2d  %s → %s  at %-9s +%-6s  failover %-6s  violations %d  ops: %s", k, rd.from, rd.to,
			rd.primary.kind, rd.delay.Round(10*time.Millisecond), rd.failover.Round(10*time.Millisecond), rd.viol, strings.Join(ops, ", ")))
	}
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	logLine(fmt.Sprintf("failover after SIGKILL: p50 %s p90 %s max %s (bound lease + 2×retry + 1s = %s)",
		pct(sorted, 50), pct(sorted, 90), sorted[len(sorted)-1].Round(10*time.Millisecond), labTiming.bound()))
	logLine(fmt.Sprintf("ops cut by a kill, by kind: %v", r.cuts))
	for _, key := range slices.Sorted(maps.Keys(r.outcomes)) {
		logLine(fmt.Sprintf("outcome  %-40s %d", key, r.outcomes[key]))
	}
	logLine(fmt.Sprintf("wall time %s (lab up and down not counted), violations %d, seed %d", time.Since(t0).Round(time.Second), r.nviol, r.seed))
	for _, kind := range []string{"Create", "Configure", "Drain", "Delete", "Migrate"} {
		if r.cuts[kind] < 2 {
			t.Errorf("only %d %s cut by a kill; want several of each kind", r.cuts[kind], kind)
		}
	}
	_ = os.MkdirAll(filepath.Join(root, "out"), 0o755)
	_ = os.WriteFile(filepath.Join(root, "out/test-ha-lab.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
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
