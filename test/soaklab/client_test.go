//go:build soaklab

package soaklab

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// shard is one BigFleet shard: its own certificate (conn), shard_id and
// epoch, one sequence counter (so every token it sends, on any machine, is
// newer than the last), and the machines it owns.
type shard struct {
	s     *soak
	id    string
	epoch int64
	conn  *grpc.ClientConn
	*soakkit.Draws
}

// drive runs one machine's churn until the soak stops. The machine's lock
// is held for a whole operation (send, retries, outcome), so checks that
// take it see the machine between operations.
func (c *shard) drive(id string) {
	for !c.s.stop.Load() {
		for c.s.holding.Load() && !c.s.stop.Load() {
			time.Sleep(100 * time.Millisecond)
		}
		mu := c.s.locks[id]
		mu.Lock()
		if !c.s.stop.Load() {
			c.step(id)
		}
		mu.Unlock()
		time.Sleep(c.Between(200*time.Millisecond, 2*time.Second))
	}
}

// step moves the machine one edge along Create → Configure → Drain →
// Delete, or live-migrates it within its zone, as BigFleet and an
// operator would from what Get shows.
func (c *shard) step(id string) {
	m, err := soakkit.Get(c.conn, id)
	if err != nil {
		c.s.violate(soakkit.ClOther, "get|"+err.Error(), fmt.Sprintf("Get %s: %v", id, err), nil)
		return
	}
	r := c.Float()
	switch st := m.GetState(); {
	case st == pb.MachineState_MACHINE_STATE_SPECULATIVE:
		c.run(id, "Create")
	case st == pb.MachineState_MACHINE_STATE_IDLE && r < 0.25:
		c.run(id, "Delete")
	case st == pb.MachineState_MACHINE_STATE_IDLE && r < 0.45:
		c.s.migrate(id, m)
	case st == pb.MachineState_MACHINE_STATE_IDLE:
		c.run(id, "Configure")
	case st == pb.MachineState_MACHINE_STATE_CONFIGURED && r < 0.3:
		c.s.migrate(id, m)
	case st == pb.MachineState_MACHINE_STATE_CONFIGURED:
		c.run(id, "Drain")
	case st == pb.MachineState_MACHINE_STATE_FAILED:
		c.s.judgeFailed(nil, m)
		c.s.release(id)
	default: // transitional: an operation resumed by the provider
		c.s.await(&soakkit.OpRecord{Machine: id, Kind: "resumed", Target: soakkit.StableOf(st), Sent: time.Now()})
	}
}

var targets = map[string]pb.MachineState{
	"Create": pb.MachineState_MACHINE_STATE_IDLE, "Configure": pb.MachineState_MACHINE_STATE_CONFIGURED,
	"Drain": pb.MachineState_MACHINE_STATE_IDLE, "Delete": pb.MachineState_MACHINE_STATE_SPECULATIVE,
}

// run sends one mutation (retrying like BigFleet) and waits for its outcome.
func (c *shard) run(id, kind string) {
	op := &soakkit.OpRecord{Client: c.id, Machine: id, Kind: kind, Target: targets[kind], Sent: time.Now()}
	build, b := c.request(id, kind)
	if kind == "Configure" {
		op.Cluster = b.Cluster
		c.s.led.SetSent(id, b)
	}
	ack, seq, maybe, err := soakkit.Send(c.conn, kind, c.Next, build)
	switch {
	case err == nil:
		op.OpID, op.Acked, op.Epoch, op.Seq = ack.GetOperationId(), time.Now(), c.epoch, seq
		if kind == "Drain" || kind == "Delete" {
			c.s.unbind(id) // BigFleet asked for the binding to end
		}
	case status.Code(err) == codes.Aborted && maybe:
		// An earlier attempt may have been accepted before a fault hid its
		// answer, and the machine has moved on since: judge what it became.
		if kind == "Drain" || kind == "Delete" {
			c.s.unbind(id)
		}
	case status.Code(err) == codes.Aborted:
		return // the machine changed under us (e.g. reconcile): re-read next step
	default:
		c.s.violate(soakkit.ClOther, "rpc|"+kind+"|"+status.Code(err).String(),
			fmt.Sprintf("%s %s: %v", kind, id, err), nil)
		return
	}
	c.s.led.AddOp(op)
	c.s.await(op)
}

// request builds the mutation with a fresh token per attempt.
func (c *shard) request(id, kind string) (func(seq int64) proto.Message, soakkit.Binding) {
	var b soakkit.Binding
	var blob []byte
	grace := int64(c.Between(0, 3*time.Second) / time.Second)
	if kind == "Configure" {
		var n int
		n, blob = c.Configure(16*1024, nil)
		b = soakkit.Binding{Cluster: fmt.Sprintf("%s-c%d", c.id, n%3),
			Meta: map[string]string{"shard": c.id, "n": strconv.Itoa(n)}}
	}
	return soakkit.Request(c.id, c.epoch, id, kind, b, blob, grace), b
}

// migrate live-migrates an IDLE or CONFIGURED machine to the other host of
// its zone through the admin API, as an operator evacuating a host would.
// A refused or failed migration is allowed (a host may be dark); the
// machine must then still be where and what it was, never FAILED.
func (s *soak) migrate(id string, before *pb.Machine) {
	op := &soakkit.OpRecord{Client: "admin", Machine: id, Kind: "Migrate", Target: before.GetState(), Sent: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), migrateTimeout+30*time.Second)
	defer cancel()
	s.setMigrating(id, true)
	var res adminv1.MigrateMachineResponse
	err := s.admin.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/MigrateMachine", &adminv1.MigrateMachineRequest{Id: id}, &res)
	if status.Code(err) != codes.DeadlineExceeded {
		// Answered: the migration is over, either way. (One whose call
		// timed out may still run: its copies are not judged from then.)
		s.setMigrating(id, false)
	}
	switch status.Code(err) {
	case codes.OK:
		op.OpID, op.Acked = fmt.Sprintf("migrate-%s-%d", id, op.Sent.UnixNano()), time.Now()
		s.logf("migrated %s %s → %s in %s", id, res.GetFromHost(), res.GetToHost(), time.Since(op.Sent).Round(100*time.Millisecond))
	case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded, codes.NotFound:
		// A dark source or destination, a machine that moved on, or a
		// provider restarted under the call: judged by what it is now.
		op.Outcome = "refused: " + status.Code(err).String()
		s.logf("migrate %s refused: %v", id, err)
	default:
		s.violate(soakkit.ClOther, "migrate|"+status.Code(err).String(), fmt.Sprintf("MigrateMachine %s: %v", id, err), nil)
		return
	}
	s.led.AddOp(op)
	if op.OpID != "" {
		s.await(op)
		return
	}
	// Not migrated: whatever it is now is judged like any state (a FAILED
	// one too); a migration that failed is no cause for FAILED.
	s.await(&soakkit.OpRecord{Machine: id, Kind: "resumed", Target: before.GetState(), Sent: time.Now()})
}

func (s *soak) setMigrating(id string, v bool) {
	s.mu.Lock()
	s.migrating[id] = v
	s.mu.Unlock()
}
