//go:build soak

package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// client is one fenced BigFleet shard: its own shard_id and epoch, one
// sequence counter (so every token it sends, on any machine, is newer than
// the last), and the machines it owns.
type client struct {
	s     *soak
	shard string
	epoch int64
	*soakkit.Draws
}

// drive runs one machine's churn until the soak stops. The machine's lock
// is held for a whole operation (send, retries, outcome), so checks and
// faults that take it see the machine between operations.
func (c *client) drive(id string) {
	for !c.s.stop.Load() {
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
// Delete, as a shard would from what Get shows.
func (c *client) step(id string) {
	m, err := c.s.get(id)
	if err != nil {
		c.s.violate(clOther, "get|"+err.Error(), fmt.Sprintf("Get %s: %v", id, err), nil)
		return
	}
	switch st := m.GetState(); {
	case st == pb.MachineState_MACHINE_STATE_SPECULATIVE:
		c.run(id, "Create")
	case st == pb.MachineState_MACHINE_STATE_IDLE:
		if c.Float() < 0.35 {
			c.run(id, "Delete")
		} else {
			c.run(id, "Configure")
		}
	case st == pb.MachineState_MACHINE_STATE_CONFIGURED:
		c.run(id, "Drain")
	case st == pb.MachineState_MACHINE_STATE_FAILED:
		c.s.judgeFailed(nil, m)
		c.s.release(id)
	default: // transitional: an operation resumed by the provider, or adopted
		c.s.await(&opRecord{Machine: id, Kind: "resumed", Target: soakkit.StableOf(st), Sent: time.Now()})
	}
}

var targets = map[string]pb.MachineState{
	"Create": pb.MachineState_MACHINE_STATE_IDLE, "Configure": pb.MachineState_MACHINE_STATE_CONFIGURED,
	"Drain": pb.MachineState_MACHINE_STATE_IDLE, "Delete": pb.MachineState_MACHINE_STATE_SPECULATIVE,
}

// run sends one mutation (retrying like BigFleet) and waits for its outcome.
func (c *client) run(id, kind string) {
	op := &opRecord{Client: c.shard, Machine: id, Kind: kind, Target: targets[kind], Sent: time.Now()}
	build, b := c.request(id, kind)
	if kind == "Configure" {
		op.Cluster = b.Cluster
		c.s.led.SetSent(id, b)
	}
	ack, _, maybe, err := soakkit.Send(c.s.pr.conn, kind, c.Next, build)
	switch {
	case err == nil:
		op.OpID, op.Acked = ack.GetOperationId(), time.Now()
		if got := ack.GetMachine().GetState(); got == pb.MachineState_MACHINE_STATE_FAILED {
			c.s.violate(clOther, "ackfailed|"+op.OpID, fmt.Sprintf("%s ack for %s shows FAILED", kind, id), ack.GetMachine())
		}
	case status.Code(err) == codes.Aborted && maybe:
		// An earlier attempt may have been accepted before a fault hid its
		// answer, and the machine has moved on since: judge what it became.
	case status.Code(err) == codes.Aborted:
		// The machine changed under us (e.g. reconcile): re-read next step.
		return
	default:
		c.s.violate(clOther, "rpc|"+kind+"|"+status.Code(err).String(),
			fmt.Sprintf("%s %s: %v", kind, id, err), nil)
		return
	}
	c.s.led.AddOp(op)
	c.s.await(op)
}

// request builds the mutation with a fresh token per attempt. A Configure
// sometimes names cluster "exit3", whose bootstrap hook fails on purpose:
// that FAILED is legitimate and the soak must tell it from false ones.
func (c *client) request(id, kind string) (func(seq int64) proto.Message, binding) {
	var b binding
	var blob []byte
	grace := int64(c.Between(0, 3*time.Second) / time.Second)
	if kind == "Configure" {
		var bad bool
		var n int
		n, blob = c.Configure(64*1024, func(r *rand.Rand) { bad = r.IntN(12) == 0 })
		b = binding{Cluster: fmt.Sprintf("%s-c%d", c.shard, n%3),
			Meta: map[string]string{"shard": c.shard, "n": strconv.Itoa(n), "odd": "ünï\x01 \t", "empty": ""}}
		if bad {
			b.Cluster = "exit3"
		}
	}
	return soakkit.Request(c.shard, c.epoch, id, kind, b, blob, grace), b
}

// ---- reads -------------------------------------------------------------

// get reads one machine, retrying while the provider is restarting.
func (s *soak) get(id string) (*pb.Machine, error) { return soakkit.Get(s.pr.conn, id) }

// list reads every machine, retrying while the provider is restarting.
func (s *soak) list() (map[string]*pb.Machine, error) { return soakkit.List(s.pr.conn) }

func (s *soak) retry(call func(context.Context) error) error { return soakkit.Retry(call) }

func timeoutOf(kind string) time.Duration {
	switch kind {
	case "Create":
		return createTimeout
	case "Configure", "resumed":
		return configureTimeout
	case "Drain":
		return drainTimeout
	}
	return deleteTimeout
}
