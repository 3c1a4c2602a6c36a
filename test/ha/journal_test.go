//go:build ha

package ha

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/server/intents"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
	"github.com/bigfleet/libvirt-provider/server/store"
)

// ensureJournal creates the lease's shared journal, empty, as the chart
// does ("<lease>-intents" in the kubeconfig's namespace, default): a
// provider under --leader-elect refuses to start without it.
func ensureJournal(t *testing.T, k *kube, lease string) {
	t.Helper()
	cs := kubeClient(t, k)
	_, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: lease + "-intents"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create the journal ConfigMap: %v", err)
	}
}

func kubeClient(t *testing.T, k *kube) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", k.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// tokenCall is a fenced mutation through grpc-go.
func (p *provider) fenced(ctx context.Context, rpc, id string, epoch, seq int64) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var res pb.TransitionAck
	switch rpc {
	case "Create":
		return p.conn.Invoke(ctx, method+rpc, &pb.CreateRequest{MachineId: id, ShardId: "shard-a", ShardEpoch: epoch, SequenceNumber: seq}, &res)
	case "Delete":
		return p.conn.Invoke(ctx, method+rpc, &pb.DeleteRequest{MachineId: id, ShardId: "shard-a", ShardEpoch: epoch, SequenceNumber: seq}, &res)
	}
	panic(rpc)
}

func stateOf(t *testing.T, p *provider, id string) pb.MachineState {
	res, err := p.list(t.Context())
	if err != nil {
		t.Fatalf("%s List: %v", p.name, err)
	}
	for _, m := range res.GetMachines() {
		if m.GetId() == id {
			return m.GetState()
		}
	}
	t.Fatalf("%s: no machine %s", p.name, id)
	return 0
}

// TestJournalAcrossFailover: what the hosts cannot hold survives a
// SIGKILL of the leader through the shared journal (docs/ha.md). A slot
// Created and Deleted again (SPECULATIVE, no domain) keeps its fence mark:
// the new leader refuses the stale token, where without the journal it
// took it as first contact. A Create acknowledged just before the kill is
// CREATING on the new leader and finishes (here on its own fake backend:
// the real-libvirt run, TestRealLibvirtFailover, shows it on shared hosts).
func TestJournalAcrossFailover(t *testing.T) {
	k := startKube(t)
	tm := short
	// Each with a state file of its own, as the chart runs them (per pod,
	// set aside at each start).
	a := newProviderOn(t, k, "pod-a", "journal", tm, "--use-fake-backend", "--seed-count=40", "--state="+filepath.Join(t.TempDir(), "state.db"))
	b := newProviderOn(t, k, "pod-b", "journal", tm, "--use-fake-backend", "--seed-count=40", "--state="+filepath.Join(t.TempDir(), "state.db"))
	a.start(t)
	b.start(t)
	leader, _ := waitLeader(t, tm.lease+tm.bound(), a, b)
	standby := other(leader, a, b)
	ids := speculative(t, leader)
	fencedSlot, cut := ids[0], ids[1]

	if err := leader.fenced(t.Context(), "Create", fencedSlot, 5, 10); err != nil {
		t.Fatalf("Create %s: %v", fencedSlot, err)
	}
	waitFor(t, 30*time.Second, func() bool { return stateOf(t, leader, fencedSlot) == pb.MachineState_MACHINE_STATE_IDLE })
	if err := leader.fenced(t.Context(), "Delete", fencedSlot, 5, 11); err != nil {
		t.Fatalf("Delete %s: %v", fencedSlot, err)
	}
	waitFor(t, 30*time.Second, func() bool {
		return stateOf(t, leader, fencedSlot) == pb.MachineState_MACHINE_STATE_SPECULATIVE
	})
	if err := leader.fenced(t.Context(), "Create", cut, 5, 12); err != nil {
		t.Fatalf("Create %s: %v", cut, err)
	}
	leader.kill()
	if got, _ := waitLeader(t, 2*tm.bound(), standby); got != standby {
		t.Fatal("the standby did not take over")
	}

	logTakeover(t, standby)
	err := standby.fenced(t.Context(), "Create", fencedSlot, 5, 10)
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("new leader: Create %s with the stale token (5,10) after the old leader accepted (5,11): %v, want FailedPrecondition", fencedSlot, err)
	}
	if s := stateOf(t, standby, fencedSlot); s != pb.MachineState_MACHINE_STATE_SPECULATIVE {
		t.Errorf("%s is %v on the new leader, want SPECULATIVE", fencedSlot, s)
	}
	waitFor(t, 30*time.Second, func() bool { return stateOf(t, standby, cut) == pb.MachineState_MACHINE_STATE_IDLE })
	// The token of the cut Create is known too: an older one is stale.
	if err := standby.fenced(t.Context(), "Create", cut, 5, 9); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("stale Create of %s on the new leader: %v, want FailedPrecondition", cut, err)
	}
}

// TestJournalAckLatency measures what the journal adds to a Create's
// acknowledgement: 30 sequential Creates (each a journal write, and its
// outcome another) on a leader of 40 slots whose journal is empty, on one
// of 8000 slots whose journal already holds 8000 fence marks, and on a
// provider without --leader-elect; and what the takeover costs (its log
// line). The figures are docs/ha.md's.
func TestJournalAckLatency(t *testing.T) {
	k := startKube(t)
	prefill(t, k, "latency8000", 8000)
	var lines []string
	for lease, slots := range map[string]string{"latency": "40", "latency8000": "8000"} {
		p := newProviderOn(t, k, "pod-"+lease, lease, short, "--use-fake-backend", "--seed-count="+slots,
			"--state="+filepath.Join(t.TempDir(), "state.db"))
		p.start(t)
		leader, _ := waitLeader(t, short.bound()+short.lease, p)
		logTakeover(t, leader)
		d := ackTimes(t, leader)
		lines = append(lines, fmt.Sprintf("journal %s: p50 %s p90 %s", lease, p50(d), p90(d)))
		if p50(d) > time.Second {
			t.Errorf("%s: a journaled Create takes %s to acknowledge", lease, p50(d))
		}
		p.kill()
	}
	plain := &provider{name: "plain", addr: freeAddr(t), metrics: freeAddr(t), logFile: t.TempDir() + "/plain.log"}
	plain.args = []string{"--use-fake-backend", "--seed-count=40", "--addr=" + plain.addr, "--metrics-addr=" + plain.metrics, "--log-format=text"}
	dialTo(t, plain)
	plain.start(t)
	d := ackTimes(t, plain)
	lines = append(lines, fmt.Sprintf("no journal: p50 %s p90 %s", p50(d), p90(d)))
	t.Logf("Create ack, 30 sequential:\n  %s", strings.Join(lines, "\n  "))
}

func p50(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
func p90(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)*9/10] }

// prefill writes n slots' fence marks into the lease's journal, through
// the journal's own package, as a leader with that many marked slots
// would have left it.
func prefill(t *testing.T, k *kube, lease string, n int) {
	t.Helper()
	ensureJournal(t, k, lease)
	j := intents.NewJournal(kubeClient(t, k).CoreV1().ConfigMaps("default"), "default", lease+"-intents", "prefill", 10*time.Second)
	c, err := j.Claim(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	marks := map[record.MarkKey]record.Mark{}
	for i := range n {
		marks[record.MarkKey{ShardID: "bigfleet-shard-01", MachineID: fmt.Sprintf("zone-a-kvm-small-%04d", 100+i)}] = record.Mark{Epoch: 1765000000, Sequence: int64(1_000_000 + i*37)}
	}
	if err := intents.NewStore(store.NewMemory(), j, c, nil).Commit(t.Context(), record.Batch{Marks: marks}); err != nil {
		t.Fatal(err)
	}
}

func ackTimes(t *testing.T, p *provider) []time.Duration {
	var out []time.Duration
	for i, id := range speculative(t, p)[:30] {
		start := time.Now()
		if err := p.fenced(t.Context(), "Create", id, 1, int64(i+1)); err != nil {
			t.Fatalf("%s Create %s: %v", p.name, id, err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

func speculative(t *testing.T, p *provider) []string {
	t.Helper()
	res, err := p.list(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range res.GetMachines() {
		if m.GetState() == pb.MachineState_MACHINE_STATE_SPECULATIVE {
			ids = append(ids, m.GetId())
		}
	}
	return ids
}

func waitFor(t *testing.T, within time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not reached within %s", within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dialTo gives p a grpc-go connection, closed (and p killed) at the end.
func dialTo(t *testing.T, p *provider) {
	t.Helper()
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p.conn = conn
	t.Cleanup(func() { p.kill() })
}

// TestJournalMissingRefusesStart: a provider whose journal ConfigMap does
// not exist stops at startup naming it (the chart creates it; a hand-made
// deployment may not), rather than lead and lose what it accepts.
func TestJournalMissingRefusesStart(t *testing.T) {
	k := startKube(t)
	p := &provider{name: "pod-a", addr: freeAddr(t), metrics: freeAddr(t), logFile: t.TempDir() + "/pod-a.log"}
	p.args = []string{"--use-fake-backend", "--leader-elect", "--kubeconfig=" + k.kubeconfig,
		"--leader-elect-lease-name=nojournal", "--libvirt-call-timeout=500ms",
		"--leader-elect-lease=4s", "--leader-elect-renew=3s", "--leader-elect-retry=500ms",
		"--addr=" + p.addr, "--metrics-addr=" + p.metrics, "--log-format=text"}
	cmd := exec.Command(binary(t), p.args...)
	cmd.Env = append(os.Environ(), "POD_NAME=pod-a")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the journal ConfigMap default/nojournal-intents does not exist") {
		t.Fatalf("start without the journal: %v\n%s", err, out)
	}
}

// logTakeover logs the new leader's takeover line (what it took from the
// journal and how long the takeover took) and its acting line (how long
// until it served), and fails if there is no takeover line.
func logTakeover(t *testing.T, p *provider) {
	t.Helper()
	b, _ := os.ReadFile(p.logFile)
	took := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "took over the shared journal") || strings.Contains(l, "leader: acting") {
			t.Logf("%s: %s", p.name, l)
			took = took || strings.Contains(l, "took over the shared journal")
		}
	}
	if !took {
		t.Errorf("%s never took over the journal:\n%s", p.name, p.tail())
	}
}
