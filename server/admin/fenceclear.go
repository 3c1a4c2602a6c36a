package admin

import (
	"context"
	"log/slog"

	"connectrpc.com/connect"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/convert"
)

const actionFenceClear = "fence-clear"

// ClearFenceMark removes one shard's fence mark on a machine (issue 39):
// gated, logged and counted like every write; the engine records it in
// the machine's history and logs the WARN line.
func (s *Service) ClearFenceMark(ctx context.Context, req *connect.Request[adminv1.ClearFenceMarkRequest]) (*connect.Response[adminv1.ClearFenceMarkResponse], error) {
	id, shard := req.Msg.GetMachineId(), req.Msg.GetShardId()
	target := slog.String("machine", id)
	a, err := s.allow(ctx, actionFenceClear, target, req.Peer())
	if err != nil {
		return nil, err
	}
	c, err := s.eng.ClearMark(ctx, id, shard, a.identity)
	s.done(a, actionFenceClear, target, "", req.Peer(), err)
	if err != nil {
		return nil, convert.WireError(err)
	}
	limit, _ := s.eng.ShardLimit()
	return connect.NewResponse(&adminv1.ClearFenceMarkResponse{
		Cleared:               &adminv1.FenceMark{MachineId: id, Epoch: c.Mark.Epoch, Sequence: c.Mark.Sequence},
		Machine:               s.machineView(c.Machine, s.now()),
		ShardsLeft:            int32(c.ShardsLeft),
		ShardsPerMachineLimit: int32(limit),
	}), nil
}
