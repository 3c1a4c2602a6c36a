//go:build ha

package ha

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// The operations TestLabFailover and TestLabCutFromAPI drive: each
// machine's next step, the machine brought to a kill's kind, the calls.

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
