package admin

import (
	"context"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/convert"
)

const actionMigrate = "migrate"

// MigrateMachine is gated, logged and counted like every write; it waits
// for the migration (the engine bounds it by --migrate-timeout and does
// not let a dropped client cut it).
func (s *Service) MigrateMachine(ctx context.Context, req *connect.Request[adminv1.MigrateMachineRequest]) (*connect.Response[adminv1.MigrateMachineResponse], error) {
	id, to := req.Msg.GetId(), req.Msg.GetToHost()
	target := slog.String("machine", id)
	a, err := s.allow(ctx, actionMigrate, target, req.Peer())
	if err != nil {
		return nil, err
	}
	res, err := s.eng.Migrate(ctx, id, to) // validates id
	s.done(a, actionMigrate, target, "", req.Peer(), err)
	if err != nil {
		return nil, convert.WireError(err)
	}
	return connect.NewResponse(&adminv1.MigrateMachineResponse{
		Machine:   s.machineView(res.Machine, s.now()),
		FromHost:  res.From,
		ToHost:    res.To,
		Placement: res.Why,
		Took:      durationpb.New(res.Took),
	}), nil
}
