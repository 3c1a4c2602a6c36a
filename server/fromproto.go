package server

import (
	"maps"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/server/convert"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func tokenOf(shardID string, epoch, seq int64) record.Token {
	return record.Token{ShardID: shardID, Epoch: epoch, Sequence: seq}
}

func createFromProto(r *pb.CreateRequest) record.CreateRequest {
	return record.CreateRequest{
		MachineID: r.GetMachineId(),
		Token:     tokenOf(r.GetShardId(), r.GetShardEpoch(), r.GetSequenceNumber()),
	}
}

// configureFromProto copies the metadata map: the engine stores what it is
// given, and the decoded message belongs to the RPC, not to the engine.
func configureFromProto(r *pb.ConfigureRequest) record.ConfigureRequest {
	return record.ConfigureRequest{
		MachineID:     r.GetMachineId(),
		ClusterID:     r.GetClusterId(),
		BootstrapBlob: r.GetBootstrapBlob(),
		ShardMetadata: maps.Clone(r.GetShardMetadata()),
		Token:         tokenOf(r.GetShardId(), r.GetShardEpoch(), r.GetSequenceNumber()),
	}
}

func drainFromProto(r *pb.DrainRequest) record.DrainRequest {
	return record.DrainRequest{
		MachineID:    r.GetMachineId(),
		GraceSeconds: r.GetGracePeriodSeconds(),
		Token:        tokenOf(r.GetShardId(), r.GetShardEpoch(), r.GetSequenceNumber()),
	}
}

func deleteFromProto(r *pb.DeleteRequest) record.DeleteRequest {
	return record.DeleteRequest{
		MachineID: r.GetMachineId(),
		Token:     tokenOf(r.GetShardId(), r.GetShardEpoch(), r.GetSequenceNumber()),
	}
}

// listFromProto passes max_results through unclamped: whether a negative
// cap is an error is the engine's rule, not the mapping's.
func listFromProto(r *pb.ListFilter) record.ListQuery {
	q := record.ListQuery{
		MaxResults: int(r.GetMaxResults()),
		Since:      r.GetSinceRevision(),
	}
	for _, s := range r.GetStates() {
		q.States = append(q.States, record.State(s))
	}
	return q
}

func ackToProto(a record.Ack) *pb.TransitionAck {
	return &pb.TransitionAck{OperationId: a.OperationID, Machine: convert.MachineToProto(a.Machine)}
}
