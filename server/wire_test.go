package server

import (
	"crypto/tls"
	"maps"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
)

// TestWireProtocols drives every client stack (grpc-go, Connect binary and
// JSON, gRPC via connect-go, gRPC-Web) over every transport mode.
func TestWireProtocols(t *testing.T) {
	t.Parallel()
	for _, mode := range []serverMode{modeH2C, modeTLS, modeMTLS} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ts := startServer(t, mode)
			var tlsCfg *tls.Config
			if mode != modeH2C {
				tlsCfg = ts.pki.clientTLS(mode == modeMTLS)
			}
			for name, c := range clientStacks(t, ts, tlsCfg) {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					exerciseService(t, c)
				})
			}
		})
	}
}

func exerciseService(t *testing.T, c rpcClient) {
	ctx := t.Context()
	var m pb.Machine
	if _, err := c.call(ctx, bigfleetv1alpha1connect.CapacityProviderGetProcedure, &pb.MachineRef{Id: "m-spec"}, &m); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if m.GetState() != pb.MachineState_MACHINE_STATE_SPECULATIVE || m.Host != nil {
		t.Errorf("Get m-spec: state %v host %v; want SPECULATIVE and no host", m.GetState(), m.Host)
	}
	if m.GetAllocatable().GetResources()["memory"] != "4Gi" || m.GetCapacityType() != pb.CapacityType_CAPACITY_TYPE_ON_DEMAND {
		t.Errorf("Get m-spec: lost fields: %v", &m)
	}

	_, err := c.call(ctx, bigfleetv1alpha1connect.CapacityProviderGetProcedure, &pb.MachineRef{Id: "nope"}, &pb.Machine{})
	if got := codeOfErr(err); got != connect.CodeNotFound {
		t.Errorf("Get unknown: code %v (%v), want not_found", got, err)
	}

	meta := map[string]string{"k": "v\x00\u00e9", "empty": ""}
	var ack pb.TransitionAck
	_, err = c.call(ctx, bigfleetv1alpha1connect.CapacityProviderConfigureProcedure, &pb.ConfigureRequest{
		MachineId: "m-idle", ClusterId: "c1", BootstrapBlob: []byte("blob"), ShardMetadata: meta,
		ShardId: "s", ShardEpoch: 1, SequenceNumber: 2,
	}, &ack)
	if err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if ack.GetOperationId() != "op-m-idle" || ack.GetMachine().GetState() != pb.MachineState_MACHINE_STATE_CONFIGURING ||
		!maps.Equal(ack.GetMachine().GetShardMetadata(), meta) || ack.GetMachine().GetHost().GetRef() != "z1/dom" {
		t.Errorf("Configure ack = %v", &ack)
	}

	var list pb.MachineList
	if _, err := c.call(ctx, bigfleetv1alpha1connect.CapacityProviderListProcedure, &pb.ListFilter{SinceRevision: []byte{0, 1, 0xff}}, &list); err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list.GetMachines()) != 2 || string(list.GetRevision()) != "rev:\x00\x01\xff" {
		t.Errorf("List = %d machines, revision %q", len(list.GetMachines()), list.GetRevision())
	}
}
