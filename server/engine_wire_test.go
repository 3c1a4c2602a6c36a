package server

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
	"github.com/bigfleet/libvirt-provider/server/store"
)

// realProvider serves the real engine over a memory store and the fake
// backend, so these tests see exactly what BigFleet's client would.
type realProvider struct {
	*testServer
	be  *fake.Backend
	c   grpcClient
	eng *lifecycle.Engine
}

func startReal(t *testing.T) *realProvider {
	t.Helper()
	be := fake.New(fake.Options{Zones: []string{"z1"}})
	var seed []record.Machine
	for _, id := range []string{"m1", "m2", "m3", "m4", "m5", "m6"} {
		seed = append(seed, record.Machine{ID: id, InstanceType: "kvm.small", Zone: "z1",
			CapacityType: record.CapacityOnDemand, PricePerHour: 0.01, VCPU: 2, MemoryMiB: 4096,
			Allocatable: map[string]string{"cpu": "2", "memory": "4Gi"}})
	}
	seed = append(seed, record.Machine{ID: "metal", InstanceType: "kvm.small", Zone: "z1",
		CapacityType: record.CapacityBareMetal, VCPU: 2, MemoryMiB: 4096})
	eng, err := lifecycle.New(lifecycle.Config{Provider: "wire-test", Seed: seed}, store.NewMemory(), be)
	if err != nil {
		t.Fatal(err)
	}
	eng.Start(t.Context())
	waitListed(t, eng)
	t.Cleanup(eng.Close)
	ts := startServerWith(t, modeH2C, eng)
	return &realProvider{testServer: ts, be: be, c: grpcClient{dialGRPC(t, ts, nil)}, eng: eng}
}

const svc = "/" + bigfleetv1alpha1connect.CapacityProviderName + "/"

func (p *realProvider) ack(t *testing.T, method string, req proto.Message) (*pb.TransitionAck, error) {
	t.Helper()
	out := new(pb.TransitionAck)
	_, err := p.c.call(t.Context(), svc+method, req, out)
	return out, err
}

func (p *realProvider) get(t *testing.T, id string) *pb.Machine {
	t.Helper()
	out := new(pb.Machine)
	if _, err := p.c.call(t.Context(), svc+"Get", &pb.MachineRef{Id: id}, out); err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return out
}

// waitState polls Get, as BigFleet does, until the machine reaches want.
func (p *realProvider) waitState(t *testing.T, id string, want pb.MachineState) *pb.Machine {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		m := p.get(t, id)
		if m.GetState() == want {
			return m
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s stuck in %v (last_error %q), want %v", id, m.GetState(), m.GetLastError(), want)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestEngineLifecycleOverWire walks one machine through every edge with the
// grpc-go client and checks the data rules on the way.
func TestEngineLifecycleOverWire(t *testing.T) {
	t.Parallel()
	p := startReal(t)
	if m := p.get(t, "m1"); m.Host != nil || m.GetState() != pb.MachineState_MACHINE_STATE_SPECULATIVE {
		t.Fatalf("seed slot = %v", m)
	}
	a, err := p.ack(t, "Create", &pb.CreateRequest{MachineId: "m1", ShardId: "s", ShardEpoch: 1, SequenceNumber: 1})
	if err != nil || a.GetMachine().GetState() != pb.MachineState_MACHINE_STATE_CREATING || a.GetOperationId() == "" {
		t.Fatalf("Create = %v, %v", a, err)
	}
	idle := p.waitState(t, "m1", pb.MachineState_MACHINE_STATE_IDLE)
	if idle.GetHost().GetProvider() != "wire-test" || idle.GetHost().GetRef() == "" {
		t.Errorf("IDLE host = %v", idle.GetHost())
	}
	retry, err := p.ack(t, "Create", &pb.CreateRequest{MachineId: "m1", ShardId: "s", ShardEpoch: 1, SequenceNumber: 2})
	if err != nil || retry.GetOperationId() != a.GetOperationId() {
		t.Errorf("Create retry on IDLE = %v, %v; want the same operation id", retry, err)
	}

	meta := map[string]string{"unicode": "\u00e9\u4e16", "ctl": "a\x01\nb", "empty": ""}
	if _, err := p.ack(t, "Configure", &pb.ConfigureRequest{MachineId: "m1", ClusterId: "c1",
		BootstrapBlob: []byte("blob"), ShardMetadata: meta, ShardId: "s", ShardEpoch: 1, SequenceNumber: 3}); err != nil {
		t.Fatal(err)
	}
	conf := p.waitState(t, "m1", pb.MachineState_MACHINE_STATE_CONFIGURED)
	if conf.GetCluster() != "c1" || !maps.Equal(conf.GetShardMetadata(), meta) {
		t.Errorf("CONFIGURED = cluster %q metadata %q", conf.GetCluster(), conf.GetShardMetadata())
	}
	if _, err := p.ack(t, "Drain", &pb.DrainRequest{MachineId: "m1", GracePeriodSeconds: 0, ShardId: "s", ShardEpoch: 1, SequenceNumber: 4}); err != nil {
		t.Fatal(err)
	}
	drained := p.waitState(t, "m1", pb.MachineState_MACHINE_STATE_IDLE)
	if drained.GetCluster() != "" || len(drained.GetShardMetadata()) != 0 {
		t.Errorf("after Drain: cluster %q metadata %v", drained.GetCluster(), drained.GetShardMetadata())
	}
	if _, err := p.ack(t, "Delete", &pb.DeleteRequest{MachineId: "m1", ShardId: "s", ShardEpoch: 1, SequenceNumber: 5}); err != nil {
		t.Fatal(err)
	}
	if back := p.waitState(t, "m1", pb.MachineState_MACHINE_STATE_SPECULATIVE); back.Host != nil {
		t.Errorf("host not cleared after Delete: %v", back.GetHost())
	}
}

// TestEngineErrorCodesOverWire pins the contract's error table as grpc-go
// sees it.
func TestEngineErrorCodesOverWire(t *testing.T) {
	t.Parallel()
	p := startReal(t)
	// Preparation: m2 IDLE, metal IDLE (bare metal).
	for _, id := range []string{"m2", "metal"} {
		if _, err := p.ack(t, "Create", &pb.CreateRequest{MachineId: id}); err != nil {
			t.Fatal(err)
		}
		p.waitState(t, id, pb.MachineState_MACHINE_STATE_IDLE)
	}
	// A fence mark on m3 at (s, 5, 5) and on an unknown id at (s, 5, 5).
	if _, err := p.ack(t, "Create", &pb.CreateRequest{MachineId: "m3", ShardId: "s", ShardEpoch: 5, SequenceNumber: 5}); err != nil {
		t.Fatal(err)
	}
	_, err := p.ack(t, "Create", &pb.CreateRequest{MachineId: "ghost", ShardId: "s", ShardEpoch: 5, SequenceNumber: 5})
	if codeOfErr(err) != connect.CodeNotFound {
		t.Fatalf("first contact with an unknown id: %v, want not_found", err)
	}

	cases := []struct {
		name   string
		method string
		req    proto.Message
		want   connect.Code
	}{
		{"empty machine_id", "Create", &pb.CreateRequest{}, connect.CodeInvalidArgument},
		{"negative grace", "Drain", &pb.DrainRequest{MachineId: "m2", GracePeriodSeconds: -1}, connect.CodeInvalidArgument},
		{"negative sequence is an ordinary value", "Delete", &pb.DeleteRequest{MachineId: "m5", ShardId: "neg", ShardEpoch: 22, SequenceNumber: -1}, connect.CodeAborted},
		{"stale after a negative sequence", "Delete", &pb.DeleteRequest{MachineId: "m5", ShardId: "neg", ShardEpoch: 21, SequenceNumber: 1}, connect.CodeFailedPrecondition},
		{"blob over cap", "Configure", &pb.ConfigureRequest{MachineId: "m2", ClusterId: "c", BootstrapBlob: make([]byte, 4<<20+1)}, connect.CodeInvalidArgument},
		{"stale token replay", "Create", &pb.CreateRequest{MachineId: "m3", ShardId: "s", ShardEpoch: 5, SequenceNumber: 5}, connect.CodeFailedPrecondition},
		{"older epoch", "Create", &pb.CreateRequest{MachineId: "m3", ShardId: "s", ShardEpoch: 4, SequenceNumber: 99}, connect.CodeFailedPrecondition},
		{"stale token on unknown id", "Create", &pb.CreateRequest{MachineId: "ghost", ShardId: "s", ShardEpoch: 5, SequenceNumber: 5}, connect.CodeFailedPrecondition},
		{"unknown id", "Create", &pb.CreateRequest{MachineId: "nope"}, connect.CodeNotFound},
		{"configure on speculative", "Configure", &pb.ConfigureRequest{MachineId: "m5", ClusterId: "c"}, connect.CodeAborted},
		{"drain on idle", "Drain", &pb.DrainRequest{MachineId: "m2"}, connect.CodeAborted},
		{"delete on speculative", "Delete", &pb.DeleteRequest{MachineId: "m5"}, connect.CodeAborted},
		{"bare metal delete", "Delete", &pb.DeleteRequest{MachineId: "metal"}, connect.CodeUnimplemented},
	}
	for _, tc := range cases {
		_, err := p.ack(t, tc.method, tc.req)
		if got := codeOfErr(err); got != tc.want {
			t.Errorf("%s: code %v (%v), want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := p.c.call(t.Context(), svc+"Get", &pb.MachineRef{Id: "nope"}, &pb.Machine{}); codeOfErr(err) != connect.CodeNotFound {
		t.Errorf("Get unknown: %v", err)
	}
	if _, err := p.c.call(t.Context(), svc+"Get", &pb.MachineRef{}, &pb.Machine{}); codeOfErr(err) != connect.CodeInvalidArgument {
		t.Errorf("Get empty id: %v", err)
	}
	// Nothing changed for the refused requests.
	if m := p.get(t, "m5"); m.GetState() != pb.MachineState_MACHINE_STATE_SPECULATIVE {
		t.Errorf("m5 moved to %v", m.GetState())
	}
	// A host outage that prevents accepting is Unavailable (retryable).
	p.be.SetZoneDown("z1", true)
	_, err = p.ack(t, "Create", &pb.CreateRequest{MachineId: "m6"})
	if codeOfErr(err) != connect.CodeUnavailable {
		t.Errorf("Create with the zone down: %v, want unavailable", err)
	}
	p.be.SetZoneDown("z1", false)
	// FailedPrecondition never leaks from anything but the fence.
	if !strings.Contains(p.logs.String(), `"code":"failed_precondition"`) {
		t.Error("fencing refusals not logged with their code")
	}
}

// TestEngineListPagingOverWire: the opaque cursor survives the wire byte
// for byte and paging walks the fleet with no duplicate and no gap.
func TestEngineListPagingOverWire(t *testing.T) {
	t.Parallel()
	p := startReal(t)
	seen := map[string]bool{}
	var cursor []byte
	for range 10 {
		out := new(pb.MachineList)
		if _, err := p.c.call(t.Context(), svc+"List", &pb.ListFilter{MaxResults: 3, SinceRevision: cursor}, out); err != nil {
			t.Fatal(err)
		}
		if len(out.GetMachines()) == 0 {
			break
		}
		for _, m := range out.GetMachines() {
			if seen[m.GetId()] {
				t.Errorf("duplicate %s", m.GetId())
			}
			seen[m.GetId()] = true
		}
		cursor = out.GetRevision()
	}
	if len(seen) != 7 {
		t.Errorf("paged through %d machines, want 7", len(seen))
	}
	out := new(pb.MachineList)
	_, err := p.c.call(t.Context(), svc+"List", &pb.ListFilter{SinceRevision: []byte("garbage")}, out)
	if err != nil || len(out.GetMachines()) != 7 {
		t.Errorf("garbage cursor: %d machines, %v; want the full list", len(out.GetMachines()), err)
	}
}

// waitListed waits for the engine's first reconcile pass, as serve does
// before it listens: mutations wait for a zone's first listing.
func waitListed(t *testing.T, eng *lifecycle.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if !eng.WaitFirstReconcile(ctx) {
		t.Fatal("no first reconcile within 5s")
	}
}
