// Command ceiling is the one-connection benchmark's ceiling (issue 24): the
// same HTTP/2 listener as bin/libvirt (server.Listen: same protocols, limits
// and HTTP/2 settings) serving a Connect CapacityProvider handler whose Get
// answers every call with one fixed, pre-encoded Machine and nothing else:
// no interceptors, no engine, no logging, no metrics. What bin/libvirt's Get
// reaches on one connection is measured against it in the same run.
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
var fixed = func() []byte {
	m := &pb.Machine{
		Id:           "certify-fake-z1-000042",
		State:        pb.MachineState_MACHINE_STATE_SPECULATIVE,
		Host:         &pb.HostRef{Provider: "certify", Ref: "fake://z1/000042"},
		CapacityType: pb.CapacityType(1),
		PricePerHour: 0.0416,
		Resources:    &pb.Resources{Resources: map[string]string{"cpu": "2", "memory": "4Gi"}},
		Allocatable:  &pb.Resources{Resources: map[string]string{"cpu": "2", "memory": "4Gi"}},
		Labels:       map[string]string{"node.kubernetes.io/instance-type": "m.small", "topology.kubernetes.io/zone": "z1"},
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}()

type bare struct {
	bigfleetv1alpha1connect.UnimplementedCapacityProviderHandler
}

func (bare) Get(context.Context, *connect.Request[pb.MachineRef]) (*connect.Response[pb.Machine], error) {
	m := new(pb.Machine)
	m.ProtoReflect().SetUnknown(fixed)
	return connect.NewResponse(m), nil
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
