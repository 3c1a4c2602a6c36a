package soakkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// MethodPrefix is the CapacityProvider service's method path.
const MethodPrefix = "/bigfleet.v1alpha1.CapacityProvider/"

// Send is BigFleet's retry of a mutation: on Unavailable or a timeout the
// same target is asked again with a fresh, higher sequence number from next.
// maybe says an earlier attempt's fate is unknown (it may have been
// accepted); seq is the sequence number of the acknowledged attempt.
func Send(conn *grpc.ClientConn, method string, next func() int64, build func(int64) proto.Message) (ack *pb.TransitionAck, seq int64, maybe bool, err error) {
	t0 := time.Now()
	wait := 200 * time.Millisecond
	for {
		ack = &pb.TransitionAck{}
		seq = next()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = conn.Invoke(ctx, MethodPrefix+method, build(seq), ack)
		cancel()
		switch status.Code(err) {
		case codes.OK:
			return ack, seq, maybe, nil
		case codes.Unavailable, codes.DeadlineExceeded:
			maybe = true
			if time.Since(t0) > 4*time.Minute {
				return nil, seq, maybe, fmt.Errorf("still failing after 4m of retries: %w", err)
			}
			time.Sleep(wait)
			wait = min(2*wait, 2*time.Second)
		default:
			return nil, seq, maybe, err
		}
	}
}

// Retry runs a read until it answers something else than Unavailable or a
// timeout, for up to 3 minutes (a provider restarting).
func Retry(call func(context.Context) error) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := call(ctx)
		cancel()
		c := status.Code(err)
		if err == nil || (c != codes.Unavailable && c != codes.DeadlineExceeded) {
			return err
		}
		if time.Now().After(deadline) {
			return errors.Join(errors.New("provider unreachable for 3m"), err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Get reads one machine, retrying while the provider is restarting.
func Get(conn *grpc.ClientConn, id string) (*pb.Machine, error) {
	var m *pb.Machine
	err := Retry(func(ctx context.Context) error {
		m = &pb.Machine{}
		return conn.Invoke(ctx, MethodPrefix+"Get", &pb.MachineRef{Id: id}, m)
	})
	return m, err
}

// List reads every machine, retrying while the provider is restarting.
func List(conn *grpc.ClientConn) (map[string]*pb.Machine, error) {
	var l *pb.MachineList
	err := Retry(func(ctx context.Context) error {
		l = &pb.MachineList{}
		return conn.Invoke(ctx, MethodPrefix+"List", &pb.ListFilter{}, l)
	})
	out := map[string]*pb.Machine{}
	for _, m := range l.GetMachines() {
		out[m.GetId()] = m
	}
	return out, err
}

// StableOf is the state a transitional state ends in when it succeeds.
func StableOf(st pb.MachineState) pb.MachineState {
	switch st {
	case pb.MachineState_MACHINE_STATE_CREATING, pb.MachineState_MACHINE_STATE_DRAINING:
		return pb.MachineState_MACHINE_STATE_IDLE
	case pb.MachineState_MACHINE_STATE_CONFIGURING:
		return pb.MachineState_MACHINE_STATE_CONFIGURED
	}
	return pb.MachineState_MACHINE_STATE_SPECULATIVE
}

// Transitional says whether st is a transition under way.
func Transitional(st pb.MachineState) bool {
	switch st {
	case pb.MachineState_MACHINE_STATE_CREATING, pb.MachineState_MACHINE_STATE_CONFIGURING,
		pb.MachineState_MACHINE_STATE_DRAINING, pb.MachineState_MACHINE_STATE_DELETING:
		return true
	}
	return false
}

// HasVM says whether a machine in st owns a domain.
func HasVM(st pb.MachineState) bool {
	return st == pb.MachineState_MACHINE_STATE_IDLE || st == pb.MachineState_MACHINE_STATE_CONFIGURED ||
		st == pb.MachineState_MACHINE_STATE_FAILED
}
