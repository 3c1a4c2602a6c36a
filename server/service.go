package server

import (
	"context"

	"connectrpc.com/connect"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
	"github.com/bigfleet/libvirt-provider/server/convert"
)

// service implements the generated CapacityProviderHandler. Each method is
// translate → delegate → translate; policy lives in the engine, codes in
// convert.WireError.
type service struct {
	engine Engine
}

var _ bigfleetv1alpha1connect.CapacityProviderHandler = (*service)(nil)

func (s *service) Create(ctx context.Context, req *connect.Request[pb.CreateRequest]) (*connect.Response[pb.TransitionAck], error) {
	ack, err := s.engine.Create(ctx, createFromProto(req.Msg))
	if err != nil {
		return nil, convert.WireError(err)
	}
	return connect.NewResponse(ackToProto(ack)), nil
}

func (s *service) Configure(ctx context.Context, req *connect.Request[pb.ConfigureRequest]) (*connect.Response[pb.TransitionAck], error) {
	ack, err := s.engine.Configure(ctx, configureFromProto(req.Msg))
	if err != nil {
		return nil, convert.WireError(err)
	}
	return connect.NewResponse(ackToProto(ack)), nil
}

func (s *service) Drain(ctx context.Context, req *connect.Request[pb.DrainRequest]) (*connect.Response[pb.TransitionAck], error) {
	ack, err := s.engine.Drain(ctx, drainFromProto(req.Msg))
	if err != nil {
		return nil, convert.WireError(err)
	}
	return connect.NewResponse(ackToProto(ack)), nil
}

func (s *service) Delete(ctx context.Context, req *connect.Request[pb.DeleteRequest]) (*connect.Response[pb.TransitionAck], error) {
	ack, err := s.engine.Delete(ctx, deleteFromProto(req.Msg))
	if err != nil {
		return nil, convert.WireError(err)
	}
	return connect.NewResponse(ackToProto(ack)), nil
}

func (s *service) Get(ctx context.Context, req *connect.Request[pb.MachineRef]) (*connect.Response[pb.Machine], error) {
	m, err := s.engine.GetShared(ctx, req.Msg.GetId())
	if err != nil {
		return nil, convert.WireError(err)
	}
	return connect.NewResponse(machineMessage(m)), nil
}

func (s *service) List(ctx context.Context, req *connect.Request[pb.ListFilter]) (*connect.Response[pb.MachineList], error) {
	res, err := s.engine.ListShared(ctx, listFromProto(req.Msg))
	if err != nil {
		return nil, convert.WireError(err)
	}
	return connect.NewResponse(listMessage(res)), nil
}
