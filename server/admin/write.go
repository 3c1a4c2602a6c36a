package admin

import (
	"context"

	"connectrpc.com/connect"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
)

const (
	actionRelease   = "release"
	actionReconcile = "reconcile"
)

// allow decides whether a write may run. Refusals are logged and counted
// like the writes themselves: an operator wants to see who tried.
func (s *Service) allow(action, machineID string, p connect.Peer) error {
	if s.write {
		return nil
	}
	s.writes.WithLabelValues(action, "denied").Inc()
	s.log.Warn("admin write refused: --admin-write is off", "action", action, "machine", machineID,
		"peer", p.Addr, "protocol", p.Protocol)
	return server.WireError(&lifecycle.Error{Code: lifecycle.CodePermission,
		Msg: "admin writes are disabled on this provider (start it with --admin-write)"})
}

// done logs and counts a write that was allowed to run.
func (s *Service) done(action, machineID, opID string, p connect.Peer, err error) {
	if err != nil {
		s.writes.WithLabelValues(action, "error").Inc()
		s.log.Warn("admin write failed", "action", action, "machine", machineID,
			"peer", p.Addr, "protocol", p.Protocol, "err", err)
		return
	}
	s.writes.WithLabelValues(action, "ok").Inc()
	s.log.Info("admin write", "action", action, "machine", machineID, "op", opID,
		"peer", p.Addr, "protocol", p.Protocol)
}

func (s *Service) ReleaseMachine(ctx context.Context, req *connect.Request[adminv1.ReleaseMachineRequest]) (*connect.Response[adminv1.ReleaseMachineResponse], error) {
	id := req.Msg.GetId()
	if err := s.allow(actionRelease, id, req.Peer()); err != nil {
		return nil, err
	}
	var ack lifecycle.Ack
	err := error(&lifecycle.Error{Code: lifecycle.CodeInvalid, Msg: "id is required"})
	if id != "" {
		ack, err = s.eng.Release(ctx, id)
	}
	s.done(actionRelease, id, ack.OperationID, req.Peer(), err)
	if err != nil {
		return nil, server.WireError(err)
	}
	return connect.NewResponse(&adminv1.ReleaseMachineResponse{
		OperationId: ack.OperationID,
		Machine:     machineToProto(ack.Machine, s.now()),
	}), nil
}

func (s *Service) TriggerReconcile(ctx context.Context, req *connect.Request[adminv1.TriggerReconcileRequest]) (*connect.Response[adminv1.TriggerReconcileResponse], error) {
	if err := s.allow(actionReconcile, "", req.Peer()); err != nil {
		return nil, err
	}
	rep := s.eng.Reconcile(ctx)
	err := ctx.Err() // a pass cut short by the client is not a success
	s.done(actionReconcile, "", "", req.Peer(), err)
	if err != nil {
		return nil, server.WireError(err)
	}
	return connect.NewResponse(&adminv1.TriggerReconcileResponse{Reconcile: reconcileToProto(rep)}), nil
}
