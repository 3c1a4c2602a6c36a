package server

import (
	"testing"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func TestRequestsFromProto(t *testing.T) {
	t.Parallel()
	meta := map[string]string{"k": "v"}
	c := configureFromProto(&pb.ConfigureRequest{MachineId: "m", ClusterId: "c", BootstrapBlob: []byte{1},
		ShardMetadata: meta, ShardId: "s", ShardEpoch: 9, SequenceNumber: 1<<63 - 1})
	meta["k"] = "changed"
	if c.ShardMetadata["k"] != "v" || c.Token != (record.Token{ShardID: "s", Epoch: 9, Sequence: 1<<63 - 1}) {
		t.Errorf("configure = %+v", c)
	}
	d := drainFromProto(&pb.DrainRequest{MachineId: "m", GracePeriodSeconds: -1})
	if d.GraceSeconds != -1 {
		t.Error("negative grace must reach the engine to be refused there")
	}
	q := listFromProto(&pb.ListFilter{States: []pb.MachineState{pb.MachineState_MACHINE_STATE_IDLE}, MaxResults: -5})
	if q.MaxResults != -5 || len(q.States) != 1 || q.States[0] != record.Idle {
		t.Errorf("list = %+v", q)
	}
}
