package server

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// TestClusterIDControlCharsOverWire (issue 15 case 8): over gRPC, a
// Configure whose cluster_id holds a newline and a NUL is InvalidArgument
// naming cluster_id, and changes nothing: the machine stays IDLE and
// unbound, the backend is never called, and the fence mark does not move
// (the same token then configures the machine with a clean id).
func TestClusterIDControlCharsOverWire(t *testing.T) {
	t.Parallel()
	p := startReal(t)
	if _, err := p.ack(t, "Create", &pb.CreateRequest{MachineId: "m1"}); err != nil {
		t.Fatal(err)
	}
	p.waitState(t, "m1", pb.MachineState_MACHINE_STATE_IDLE)
	req := &pb.ConfigureRequest{MachineId: "m1", ClusterId: "a\nb\x00c", BootstrapBlob: []byte("blob"),
		ShardId: "s", ShardEpoch: 1, SequenceNumber: 1}
	_, err := p.ack(t, "Configure", req)
	if codeOfErr(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "cluster_id") {
		t.Fatalf("Configure with cluster_id %q: %v, want invalid_argument naming cluster_id", req.ClusterId, err)
	}
	if m := p.get(t, "m1"); m.GetState() != pb.MachineState_MACHINE_STATE_IDLE || m.GetCluster() != "" {
		t.Fatalf("refused Configure changed the machine: %v cluster %q", m.GetState(), m.GetCluster())
	}
	if n := p.be.Calls(fake.OpConfigure); n != 0 {
		t.Fatalf("backend Configure called %d times for a refused request", n)
	}
	req.ClusterId = "a-b-c"
	if _, err := p.ack(t, "Configure", req); err != nil {
		t.Fatalf("same token with a clean cluster_id (the mark must not have moved): %v", err)
	}
	if m := p.waitState(t, "m1", pb.MachineState_MACHINE_STATE_CONFIGURED); m.GetCluster() != "a-b-c" {
		t.Fatalf("configured as %q", m.GetCluster())
	}
}
