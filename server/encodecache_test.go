package server

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/server/convert"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// fullMachine has every field and map the wire carries set, in state s.
func fullMachine(s record.State) record.Machine {
	return record.Machine{
		ID: "zone-a-kvm-small-0007", State: s, InstanceType: "kvm.small", Zone: "zone-a",
		CapacityType: record.CapacitySpot, PricePerHour: 0.0416, InterruptionProbability: 0.05,
		Resources:   map[string]string{"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "0"},
		Allocatable: map[string]string{"cpu": "2", "memory": "4Gi"},
		Labels:      map[string]string{"team": "ml", "b": "", "a": "ü"},
		LastError:   "hook exited 3: \x00\x1b[31mno\u00e9",
		Cluster:     "c-1",
		// Any bytes a proto string may carry: unicode, control characters,
		// empty values; many keys so map order matters.
		ShardMetadata: map[string]string{"k\x01": "v\n", "": "empty key", "z": "", "日本": "語",
			"k1": "1", "k2": "2", "k3": "3", "k4": "4", "k5": "5"},
		Host: record.HostRef{Provider: "libvirt", Ref: "zone-a/h1/bf-abc"},
		// Bookkeeping that never reaches the wire.
		Domain: "bf-abc", OperationID: "op-1", Revision: 99, VCPU: 2, MemoryMiB: 4096,
	}
}

// wireCases: every state (and an impossible one, sent as FAILED), full and
// minimal records.
func wireCases() map[string]record.Machine {
	out := map[string]record.Machine{
		"minimal":    {ID: "m"},
		"impossible": fullMachine(record.State(42)),
		"nil maps":   {ID: "m2", State: record.Speculative, InstanceType: "t", Zone: "z", CapacityType: record.CapacityOnDemand},
		"empty maps": {ID: "m3", State: record.Idle, Labels: map[string]string{}, Resources: map[string]string{}, ShardMetadata: map[string]string{}},
	}
	for _, s := range append([]record.State{record.StateUnspecified}, record.AllStates...) {
		out["full "+s.String()] = fullMachine(s)
	}
	return out
}

func marshalDet(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := deterministic.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCachedBytesEqualMarshal: what Get and List put on the wire equals a
// fresh deterministic marshal of the message MachineToProto builds, for
// every state, field and map, and reads back equal.
func TestCachedBytesEqualMarshal(t *testing.T) {
	t.Parallel()
	var page lifecycle.SharedList
	for name, m := range wireCases() {
		want := marshalDet(t, convert.MachineToProto(m))
		got, err := proto.Marshal(machineMessage(&m))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: served %x (%v), want %x", name, got, err, want)
		}
		back := new(pb.Machine)
		if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, convert.MachineToProto(m)) {
			t.Errorf("%s: reads back as %v (%v)", name, back, err)
		}
		page.Machines = append(page.Machines, &m)
	}
	for _, rev := range [][]byte{nil, {1, 2, 3}} {
		page.Revision = rev
		want := marshalDet(t, sharedListToProto(page))
		got, err := proto.Marshal(listMessage(page))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("list (revision %x): served %d bytes (%v), want %d", rev, len(got), err, len(want))
		}
	}
	if got, err := proto.Marshal(listMessage(lifecycle.SharedList{})); err != nil || len(got) != 0 {
		t.Errorf("empty list: %x (%v)", got, err)
	}
}

// TestCarrierJSON: the JSON codec writes a carrier exactly as protojson
// writes the real message, and leaves the carrier's shared bytes alone.
func TestCarrierJSON(t *testing.T) {
	t.Parallel()
	m := fullMachine(record.Configured)
	page := lifecycle.SharedList{Machines: []*record.Machine{&m, &m}, Revision: []byte("cursor")}
	for name, c := range map[string]struct{ carrier, real proto.Message }{
		"machine": {machineMessage(&m), convert.MachineToProto(m)},
		"list":    {listMessage(page), sharedListToProto(page)},
		"plain":   {&pb.TransitionAck{OperationId: "op"}, &pb.TransitionAck{OperationId: "op"}},
	} {
		before := bytes.Clone(c.carrier.ProtoReflect().GetUnknown())
		got, err := jsonCodec{"json"}.Marshal(c.carrier)
		want, _ := protojson.Marshal(c.real)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: JSON %s (%v), want %s", name, got, err, want)
		}
		if after := c.carrier.ProtoReflect().GetUnknown(); !bytes.Equal(before, after) {
			t.Errorf("%s: the JSON codec changed the carrier", name)
		}
	}
}

// TestEncodingFailureFallsBack: a record a proto string cannot carry (not
// UTF-8) is not served from a cache; the ordinary marshal reports it.
func TestEncodingFailureFallsBack(t *testing.T) {
	t.Parallel()
	m := record.Machine{ID: "m", LastError: "\xff"}
	if msg := machineMessage(&m); len(msg.ProtoReflect().GetUnknown()) != 0 || msg.GetLastError() != "\xff" {
		t.Fatalf("got a carrier for an unencodable record: %v", msg)
	}
	page := lifecycle.SharedList{Machines: []*record.Machine{&m}}
	if _, err := proto.Marshal(listMessage(page)); err == nil {
		t.Fatal("a List holding an unencodable record marshalled without error")
	}
}

// rawBytes receives an answer undecoded, to compare the served bytes.
type rawBytes struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*rawBytes).b = data.Materialize()
	return nil
}

var _ encoding.CodecV2 = rawCodec{}

// TestServedBytesFollowRevisions: over gRPC with the real engine, Get and
// List serve exactly the deterministic encoding of the current record,
// before and after it changes (a stale cache would serve the old one).
func TestServedBytesFollowRevisions(t *testing.T) {
	t.Parallel()
	p := startReal(t)
	eng := p.eng
	ctx := context.Background()
	check := func(step string) {
		t.Helper()
		cur, err := eng.Get(ctx, "m1")
		if err != nil {
			t.Fatal(err)
		}
		var got rawBytes
		if err := p.c.conn.Invoke(ctx, svc+"Get", &pb.MachineRef{Id: "m1"}, &got, grpc.ForceCodecV2(rawCodec{})); err != nil {
			t.Fatal(err)
		}
		if want := marshalDet(t, convert.MachineToProto(cur)); !bytes.Equal(got.b, want) {
			t.Fatalf("%s: Get served %x, want %x", step, got.b, want)
		}
		var lst rawBytes
		if err := p.c.conn.Invoke(ctx, svc+"List", &pb.ListFilter{}, &lst, grpc.ForceCodecV2(rawCodec{})); err != nil {
			t.Fatal(err)
		}
		all, err := eng.ListShared(ctx, record.ListQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if want := marshalDet(t, sharedListToProto(all)); !bytes.Equal(lst.b, want) {
			t.Fatalf("%s: List served %d bytes, want %d", step, len(lst.b), len(want))
		}
	}
	check("speculative")
	if _, err := p.ack(t, "Create", &pb.CreateRequest{MachineId: "m1"}); err != nil {
		t.Fatal(err)
	}
	p.waitState(t, "m1", pb.MachineState_MACHINE_STATE_IDLE)
	check("idle")
	md := map[string]string{"shard": "s1", "x": "\x00\u00e9"}
	if _, err := p.ack(t, "Configure", &pb.ConfigureRequest{MachineId: "m1", ClusterId: "c1", ShardMetadata: md}); err != nil {
		t.Fatal(err)
	}
	p.waitState(t, "m1", pb.MachineState_MACHINE_STATE_CONFIGURED)
	check("configured")
	for i := range 3 {
		check(fmt.Sprintf("read %d", i))
	}
}

// FuzzListAssembly: whatever the strings (any UTF-8 a record can hold), a
// List assembled from cached encodings equals a deterministic marshal of
// the message built field by field, and the JSON codec reads it back to
// the same message.
func FuzzListAssembly(f *testing.F) {
	f.Add("m1", "k", "v", "c", "err", []byte{1, 2}, uint8(3), 0.5)
	f.Add("", "", "", "", "", []byte(nil), uint8(0), 0.0)
	f.Add("日本", "\x00", "\n", "c\x7f", "é", []byte("cursor"), uint8(8), 1e300)
	f.Fuzz(func(t *testing.T, id, key, val, cluster, lastErr string, rev []byte, state uint8, price float64) {
		ms := []record.Machine{
			{ID: id, State: record.State(state), Cluster: cluster, LastError: lastErr, PricePerHour: price,
				Labels: map[string]string{key: val, "node.kubernetes.io/instance-type": val}, ShardMetadata: map[string]string{key: val, val: key},
				Resources: map[string]string{key: val}, Host: record.HostRef{Provider: key, Ref: val}, InstanceType: val},
			fullMachine(record.State(state % 9)),
			{ID: key},
		}
		var page lifecycle.SharedList
		for i := range ms {
			page.Machines = append(page.Machines, &ms[i])
		}
		page.Revision = rev
		want, werr := deterministic.Marshal(sharedListToProto(page))
		got, gerr := proto.Marshal(listMessage(page))
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("marshal errors differ: assembled %v, fresh %v", gerr, werr)
		}
		if werr != nil {
			return // not UTF-8: both refuse
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("assembled %x, fresh %x", got, want)
		}
		js, err := jsonCodec{"json"}.Marshal(listMessage(page))
		if err != nil {
			t.Fatal(err)
		}
		back := new(pb.MachineList)
		if err := protojson.Unmarshal(js, back); err != nil || !proto.Equal(back, sharedListToProto(page)) {
			t.Fatalf("JSON reads back as %v (%v)", back, err)
		}
	})
}
