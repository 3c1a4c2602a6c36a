// Package crash kills the real provider binary with SIGKILL while it
// accepts mutations, restarts it on the same bbolt state file and checks
// that nothing it acknowledged was lost: states, operation ids, fence marks,
// and no re-seeding.
package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "crash-bin")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "libvirt")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/libvirt").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type proc struct {
	cmd  *exec.Cmd
	conn *grpc.ClientConn
}

func launch(t *testing.T, addr, state string, seed int) *proc {
	t.Helper()
	cmd := exec.Command(bin, "--addr="+addr, "--provider=certify", "--use-fake-backend",
		fmt.Sprintf("--seed-count=%d", seed), "--state="+state, "--metrics-addr=", "--log-level=error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, conn: conn}
	t.Cleanup(func() { p.kill() })
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := p.list(t.Context(), nil); err == nil {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatal("provider did not come up")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *proc) kill() {
	p.conn.Close()
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
	}
}

func (p *proc) call(ctx context.Context, method string, req, res proto.Message) error {
	return p.conn.Invoke(ctx, "/bigfleet.v1alpha1.CapacityProvider/"+method, req, res)
}

func (p *proc) list(ctx context.Context, since []byte) (*pb.MachineList, error) {
	out := new(pb.MachineList)
	return out, p.call(ctx, "List", &pb.ListFilter{SinceRevision: since}, out)
}

func (p *proc) get(t *testing.T, id string) *pb.Machine {
	out := new(pb.Machine)
	if err := p.call(t.Context(), "Get", &pb.MachineRef{Id: id}, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// acked is the last acknowledged mutation on one machine, and the one sent
// after it whose answer the kill may have swallowed (it may or may not have
// been applied: the contract promises only what was acknowledged).
type acked struct {
	method  string
	opID    string
	seq     int64
	pending string
}

var (
	transitional = map[string]pb.MachineState{"Create": pb.MachineState_MACHINE_STATE_CREATING,
		"Configure": pb.MachineState_MACHINE_STATE_CONFIGURING, "Drain": pb.MachineState_MACHINE_STATE_DRAINING,
		"Delete": pb.MachineState_MACHINE_STATE_DELETING}
	target = map[string]pb.MachineState{"Create": pb.MachineState_MACHINE_STATE_IDLE,
		"Configure": pb.MachineState_MACHINE_STATE_CONFIGURED, "Drain": pb.MachineState_MACHINE_STATE_IDLE,
		"Delete": pb.MachineState_MACHINE_STATE_SPECULATIVE}
	next = map[pb.MachineState]string{pb.MachineState_MACHINE_STATE_SPECULATIVE: "Create",
		pb.MachineState_MACHINE_STATE_IDLE: "Configure", pb.MachineState_MACHINE_STATE_CONFIGURED: "Drain"}
)

func request(method, id string, seq int64) (proto.Message, proto.Message) {
	const shard = "shard-1"
	ack := new(pb.TransitionAck)
	switch method {
	case "Create":
		return &pb.CreateRequest{MachineId: id, ShardId: shard, ShardEpoch: 1, SequenceNumber: seq}, ack
	case "Configure":
		return &pb.ConfigureRequest{MachineId: id, ClusterId: "c1", BootstrapBlob: []byte("blob"),
			ShardMetadata: map[string]string{"k": "v\x00"}, ShardId: shard, ShardEpoch: 1, SequenceNumber: seq}, ack
	case "Drain":
		return &pb.DrainRequest{MachineId: id, ShardId: shard, ShardEpoch: 1, SequenceNumber: seq}, ack
	}
	return &pb.DeleteRequest{MachineId: id, ShardId: shard, ShardEpoch: 1, SequenceNumber: seq}, ack
}

// drive walks one machine through the lifecycle until ctx ends, recording
// the last acknowledged mutation.
func drive(ctx context.Context, p *proc, id string, last *acked) {
	var seq int64
	state := pb.MachineState_MACHINE_STATE_SPECULATIVE
	for ctx.Err() == nil {
		method, ok := next[state]
		if !ok || (state == pb.MachineState_MACHINE_STATE_IDLE && last.method == "Configure") {
			method = "Delete"
		}
		if state == pb.MachineState_MACHINE_STATE_IDLE && last.method == "Create" && rand.IntN(2) == 0 {
			method = "Delete"
		}
		seq++
		last.pending = method
		req, ack := request(method, id, seq)
		if err := p.call(ctx, method, req, ack); err != nil {
			if status.Code(err) == codes.Aborted { // still transitional: look again
				m := new(pb.Machine)
				if p.call(ctx, "Get", &pb.MachineRef{Id: id}, m) == nil {
					state = m.State
				}
				continue
			}
			return // the kill
		}
		*last = acked{method: method, opID: ack.(*pb.TransitionAck).OperationId, seq: seq, pending: ""}
		state = target[method]
		time.Sleep(time.Millisecond)
	}
}

func TestSIGKILLLosesNothingAccepted(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	state := filepath.Join(t.TempDir(), "state.db")
	const seed, workers = 300, 24
	for round := range 3 {
		p := launch(t, addr, state, seed)
		if round == 0 {
			if n := len(mustList(t, p).Machines); n != seed {
				t.Fatalf("seeded %d", n)
			}
		}
		ids := freeMachines(t, p, workers)
		before := mustList(t, p).Revision // a cursor issued before the churn and the kill
		lasts := make([]acked, len(ids))
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Go(func() { drive(ctx, p, id, &lasts[i]) })
		}
		time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond)
		p.cmd.Process.Signal(syscall.SIGKILL) // mid-flight, at a random moment
		p.cmd.Wait()
		cancel()
		wg.Wait()

		q := launch(t, addr, state, seed)
		if n := len(mustList(t, q).Machines); n != seed {
			t.Fatalf("round %d: %d machines after restart, want %d (lost or re-seeded)", round, n, seed)
		}
		for i, id := range ids {
			checkAcked(t, q, id, lasts[i])
		}
		// The pre-kill cursor is still valid: its delta has every machine
		// with an acknowledged change, and nothing that did not change.
		delta, err := q.list(t.Context(), before)
		if err != nil {
			t.Fatal(err)
		}
		changed := map[string]bool{}
		for _, m := range delta.Machines {
			changed[m.Id] = true
		}
		for i, id := range ids {
			if lasts[i].method != "" && !changed[id] {
				t.Errorf("round %d: delta from a pre-kill cursor lacks %s (acked %s)", round, id, lasts[i].method)
			}
		}
		if len(delta.Machines) >= seed {
			t.Errorf("round %d: delta from a pre-kill cursor is the full list (%d machines): the cursor did not survive", round, len(delta.Machines))
		}
		q.kill()
	}
}

// freeMachines picks SPECULATIVE machines for this round's workers.
func freeMachines(t *testing.T, p *proc, n int) []string {
	var out []string
	for _, m := range mustList(t, p).Machines {
		if m.State == pb.MachineState_MACHINE_STATE_SPECULATIVE && len(out) < n {
			out = append(out, m.Id)
		}
	}
	if len(out) < n {
		t.Fatalf("only %d free machines", len(out))
	}
	return out
}

func mustList(t *testing.T, p *proc) *pb.MachineList {
	l, err := p.list(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var (
	restartMsg    = regexp.MustCompile(`restart`)
	rolledBackMsg = regexp.MustCompile(`^configure rolled back to IDLE: cut by a provider restart`)
)

// checkAcked: the last acknowledged mutation survived. Its transition is
// in flight, done, or (Configure only: the blob is never stored) ended as
// its guest told: FAILED saying the restart interrupted it (on the fake,
// whose VMs die with the provider, always: the domain is gone), or rolled
// back to IDLE; a retry with a fresh token gets the same operation id; the
// acknowledged token itself is now stale.
func checkAcked(t *testing.T, p *proc, id string, a acked) {
	t.Helper()
	if a.method == "" {
		return
	}
	m := p.get(t, id)
	if a.pending != "" && a.pending != a.method {
		switch m.State {
		case transitional[a.pending], target[a.pending]:
			return // the unacknowledged mutation was applied: allowed
		case pb.MachineState_MACHINE_STATE_FAILED:
			if a.pending == "Configure" && restartMsg.MatchString(m.LastError) {
				return
			}
		case pb.MachineState_MACHINE_STATE_IDLE:
			// The unacknowledged Configure was accepted, then cut by the
			// kill before its hook started, and rolled back: the machine
			// moved on from the acked Drain, whose retry is now Aborted.
			if a.pending == "Configure" && rolledBackMsg.MatchString(m.LastError) {
				return
			}
		}
	}
	switch m.State {
	case transitional[a.method], target[a.method]:
	case pb.MachineState_MACHINE_STATE_FAILED:
		if a.method != "Configure" || !restartMsg.MatchString(m.LastError) {
			t.Errorf("%s: FAILED after acked %s (op %s, seq %d): %q", id, a.method, a.opID, a.seq, m.LastError)
		}
		return
	case pb.MachineState_MACHINE_STATE_IDLE:
		if a.method != "Configure" || !rolledBackMsg.MatchString(m.LastError) {
			t.Errorf("%s: state IDLE after acked %s (op %s): the acknowledgement was lost (last_error %q)", id, a.method, a.opID, m.LastError)
		}
		return
	default:
		t.Errorf("%s: state %s after acked %s (op %s): the acknowledgement was lost", id, m.State, a.method, a.opID)
		return
	}
	req, ack := request(a.method, id, a.seq)
	if err := p.call(t.Context(), a.method, req, ack); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("%s: replay of acked token: %v, want FailedPrecondition (mark lost)", id, err)
	}
	req, ack = request(a.method, id, a.seq+1000)
	if err := p.call(t.Context(), a.method, req, ack); err != nil {
		t.Errorf("%s: retry of acked %s: %v", id, a.method, err)
	} else if got := ack.(*pb.TransitionAck).OperationId; got != a.opID {
		t.Errorf("%s: retry of acked %s got op %s, want %s", id, a.method, got, a.opID)
	}
}
