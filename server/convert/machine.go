package convert

import (
	"maps"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/server/capacity"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// The engine's enums share the wire numbering (see lifecycle/record), so
// mapping is a cast. The guard below is the one place that would notice if
// that stopped being true.
var _ = [1]struct{}{}[int(record.Failed)-int(pb.MachineState_MACHINE_STATE_FAILED)]

// MachineToProto builds the wire view of a record (also used by the admin
// API, so both show a machine identically). Maps are copied so the
// marshaller never reads memory the engine might reuse, and the host stays
// absent (nil) until a VM exists, as the contract requires.
func MachineToProto(m record.Machine) *pb.Machine {
	out := &pb.Machine{
		Id:                      m.ID,
		State:                   stateToProto(m.State),
		InstanceType:            m.InstanceType,
		Zone:                    m.Zone,
		CapacityType:            pb.CapacityType(m.CapacityType),
		PricePerHour:            m.PricePerHour,
		InterruptionProbability: m.InterruptionProbability,
		Resources:               resourcesToProto(m.Resources),
		Allocatable:             resourcesToProto(m.Allocatable),
		Labels:                  wireLabels(m),
		LastError:               m.LastError,
		Cluster:                 m.Cluster,
		ShardMetadata:           maps.Clone(m.ShardMetadata),
	}
	if m.Host != (record.HostRef{}) {
		out.Host = &pb.HostRef{Provider: m.Host.Provider, Ref: m.Host.Ref}
	}
	return out
}

// stateToProto never emits UNSPECIFIED: a record in an impossible state is
// reported as FAILED, which BigFleet handles, rather than a value it rejects.
func stateToProto(s record.State) pb.MachineState {
	if s <= record.StateUnspecified || s > record.Failed {
		return pb.MachineState_MACHINE_STATE_FAILED
	}
	return pb.MachineState(s)
}

func resourcesToProto(m map[string]string) *pb.Resources {
	if m == nil {
		return nil
	}
	return &pb.Resources{Resources: maps.Clone(m)}
}

// wireLabels is the record's labels without the two well-known ones the
// capacity model adds that only repeat top-level fields
// (node.kubernetes.io/instance-type = instance_type,
// topology.kubernetes.io/zone = zone). The contract has instance_type and
// zone top-level, "never hidden in labels"; the copies were 86 of a
// machine's 206 bytes, 42% of a full List (docs/wire-fields.md). A label
// with one of those keys but another value is not a copy and is kept
// (the capacity model refuses such offerings, older state files aside).
func wireLabels(m record.Machine) map[string]string {
	mirror := func(k, v string) bool {
		return (k == capacity.LabelInstanceType && v == m.InstanceType) ||
			(k == capacity.LabelZone && v == m.Zone)
	}
	n := 0
	for k, v := range m.Labels {
		if !mirror(k, v) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make(map[string]string, n)
	for k, v := range m.Labels {
		if !mirror(k, v) {
			out[k] = v
		}
	}
	return out
}
