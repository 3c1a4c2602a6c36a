package admin

import (
	"context"
	"crypto/x509"
	"log/slog"

	"connectrpc.com/connect"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/convert"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

const (
	actionRelease   = "release"
	actionReconcile = "reconcile"
	actionCordon    = "cordon"
	actionUncordon  = "uncordon"

	// Metric identities of callers no pattern matched. Every other value
	// of the identity label is an --admin-clients pattern, so the label's
	// cardinality is bounded by the flag, never by what clients present.
	labelAnonymous = Anonymous
	labelUnlisted  = "unlisted"
)

// writeMethods are the admin service's writes: gated by accessOf
// (--admin-write, --admin-clients). Every other method is a read, which
// under --caller-identity=bigfleet needs bigfleet://admin or
// bigfleet://readonly (Options.Guard).
var writeMethods = map[string]bool{"ReleaseMachine": true, "TriggerReconcile": true, "CordonHost": true,
	"UncordonHost": true, "DeclareHostDown": true, "DeclareHostUp": true, "MigrateMachine": true,
	"ClearFenceMark": true}

// IsWrite reports whether method (its short name) is an admin write.
func IsWrite(method string) bool { return writeMethods[method] }

// listed reports whether c is a certificate the service lets write: those
// may read too, whatever their bigfleet:// URI SANs (Options.Guard).
func (s *Service) listed(c *x509.Certificate) bool {
	if !s.write {
		return false
	}
	p, _ := s.clients.match(namesOf(c))
	return p != ""
}

// noTarget is the log target of a write about no one machine or host (it
// keeps the key the log had before writes had other targets).
var noTarget = slog.String("machine", "")

// access is what a caller may do, decided once per call.
type access struct {
	identity string // the name the server saw, or Anonymous
	label    string // metric identity: the matched pattern, or one of the labels above
	mayWrite bool
	reason   string // why not, when !mayWrite
}

// accessOf decides by the caller's verified client certificate alone:
// --admin-write must be on and a name of the certificate must match
// --admin-clients (an empty list allows nobody).
func (s *Service) accessOf(ctx context.Context) access {
	names, ok := callerNames(ctx)
	a := access{identity: Anonymous, label: labelAnonymous}
	if ok {
		a.identity, a.label = names.display(), labelUnlisted
		if p, name := s.clients.match(*names); p != "" {
			a.identity, a.label = name, p
		}
	}
	switch {
	case !s.write:
		a.reason = "admin writes are disabled on this provider (start it with --admin-write)"
	case !ok:
		a.reason = "admin writes need a verified client certificate listed in --admin-clients; none was presented"
	case a.label == labelUnlisted:
		a.reason = "admin writes are not allowed for " + a.identity + ": no --admin-clients pattern matches its certificate"
	default:
		a.mayWrite = true
	}
	return a
}

// allow decides whether a write may run. Refusals are logged and counted
// like the writes themselves: an operator wants to see who tried.
// target names what the write is about (machine=…, host=…).
func (s *Service) allow(ctx context.Context, action string, target slog.Attr, p connect.Peer) (access, error) {
	a := s.accessOf(ctx)
	if a.mayWrite {
		return a, nil
	}
	s.writes.WithLabelValues(action, "denied", a.label).Inc()
	s.log.Warn("admin write refused", "action", action, target, "identity", a.identity,
		"reason", a.reason, "peer", p.Addr, "protocol", p.Protocol)
	return a, convert.WireError(&record.Error{Code: record.CodePermission, Msg: a.reason})
}

// done logs and counts a write that was allowed to run, under the
// identity that was allowed.
func (s *Service) done(a access, action string, target slog.Attr, opID string, p connect.Peer, err error) {
	if err != nil {
		s.writes.WithLabelValues(action, "error", a.label).Inc()
		s.log.Warn("admin write failed", "action", action, target, "identity", a.identity,
			"allowed_by", a.label, "peer", p.Addr, "protocol", p.Protocol, "err", err)
		return
	}
	s.writes.WithLabelValues(action, "ok", a.label).Inc()
	s.log.Info("admin write", "action", action, target, "op", opID, "identity", a.identity,
		"allowed_by", a.label, "peer", p.Addr, "protocol", p.Protocol)
}

func (s *Service) WhoAmI(ctx context.Context, _ *connect.Request[adminv1.WhoAmIRequest]) (*connect.Response[adminv1.WhoAmIResponse], error) {
	a := s.accessOf(ctx)
	return connect.NewResponse(&adminv1.WhoAmIResponse{
		Identity: a.identity, Anonymous: a.label == labelAnonymous, MayWrite: a.mayWrite, Reason: a.reason,
	}), nil
}

func (s *Service) ReleaseMachine(ctx context.Context, req *connect.Request[adminv1.ReleaseMachineRequest]) (*connect.Response[adminv1.ReleaseMachineResponse], error) {
	id := req.Msg.GetId()
	target := slog.String("machine", id)
	a, err := s.allow(ctx, actionRelease, target, req.Peer())
	if err != nil {
		return nil, err
	}
	var ack record.Ack
	err = &record.Error{Code: record.CodeInvalid, Msg: "id is required"}
	if id != "" {
		ack, err = s.eng.Release(ctx, id)
	}
	s.done(a, actionRelease, target, ack.OperationID, req.Peer(), err)
	if err != nil {
		return nil, convert.WireError(err)
	}
	return connect.NewResponse(&adminv1.ReleaseMachineResponse{
		OperationId: ack.OperationID,
		Machine:     s.machineView(ack.Machine, s.now()),
	}), nil
}

func (s *Service) TriggerReconcile(ctx context.Context, req *connect.Request[adminv1.TriggerReconcileRequest]) (*connect.Response[adminv1.TriggerReconcileResponse], error) {
	a, err := s.allow(ctx, actionReconcile, noTarget, req.Peer())
	if err != nil {
		return nil, err
	}
	rep := s.eng.Reconcile(ctx)
	err = ctx.Err() // a pass cut short by the client is not a success
	s.done(a, actionReconcile, noTarget, "", req.Peer(), err)
	if err != nil {
		return nil, convert.WireError(err)
	}
	return connect.NewResponse(&adminv1.TriggerReconcileResponse{Reconcile: reconcileToProto(rep)}), nil
}
