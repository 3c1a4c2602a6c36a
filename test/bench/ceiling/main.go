// Command ceiling is the one-connection benchmark's ceiling (issue 24): the
// same HTTP/2 listener as bin/libvirt (server.Listen: same protocols, limits
// and HTTP/2 settings) serving a Connect CapacityProvider handler whose Get
// answers every call with one fixed, pre-encoded Machine, and whose Create
// and Delete answer with one fixed TransitionAck, and nothing else: no
// interceptors, no engine, no store, no logging, no metrics. What
// bin/libvirt reaches on one connection is measured against it in the same
// run: its Create ack can be no faster than this one's, whatever the engine
// and the store do.
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"log/slog"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
	"github.com/bigfleet/libvirt-provider/server"
)

// fixed is a Machine of the size the fake backend's records have, encoded
// once; every Get sends these bytes as the unknown fields of an empty
// message, as bin/libvirt's cached encodings do.
var fixed = mustMarshal(fixedMachine)

// ack is a Create's or Delete's answer (an operation id and the machine),
// encoded once: what an accepted mutation sends.
var ack = mustMarshal(&pb.TransitionAck{OperationId: "op-0123456789abcdef0123", Machine: fixedMachine})

var fixedMachine = &pb.Machine{
	Id:           "certify-fake-z1-000042",
	State:        pb.MachineState_MACHINE_STATE_SPECULATIVE,
	Host:         &pb.HostRef{Provider: "certify", Ref: "fake://z1/000042"},
	CapacityType: pb.CapacityType(1),
	PricePerHour: 0.0416,
	Resources:    &pb.Resources{Resources: map[string]string{"cpu": "2", "memory": "4Gi"}},
	Allocatable:  &pb.Resources{Resources: map[string]string{"cpu": "2", "memory": "4Gi"}},
	Labels:       map[string]string{"node.kubernetes.io/instance-type": "m.small", "topology.kubernetes.io/zone": "z1"},
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

type bare struct {
	bigfleetv1alpha1connect.UnimplementedCapacityProviderHandler
}

func (bare) Get(context.Context, *connect.Request[pb.MachineRef]) (*connect.Response[pb.Machine], error) {
	m := new(pb.Machine)
	m.ProtoReflect().SetUnknown(fixed)
	return connect.NewResponse(m), nil
}

func fixedAck() *connect.Response[pb.TransitionAck] {
	a := new(pb.TransitionAck)
	a.ProtoReflect().SetUnknown(ack)
	return connect.NewResponse(a)
}

func (bare) Create(context.Context, *connect.Request[pb.CreateRequest]) (*connect.Response[pb.TransitionAck], error) {
	return fixedAck(), nil
}

func (bare) Delete(context.Context, *connect.Request[pb.DeleteRequest]) (*connect.Response[pb.TransitionAck], error) {
	return fixedAck(), nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	mux := http.NewServeMux()
	mux.Handle(bigfleetv1alpha1connect.NewCapacityProviderHandler(bare{}))
	lis, err := server.Listen(*addr, mux, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(lis.Serve())
}
