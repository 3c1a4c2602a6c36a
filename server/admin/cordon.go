package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/convert"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// byHostsFile is the HostCordon.by of a host cordoned by the hosts file
// (cordoned: true) and not through the admin API.
const byHostsFile = "hosts file"

func (s *Service) CordonHost(ctx context.Context, req *connect.Request[adminv1.CordonHostRequest]) (*connect.Response[adminv1.CordonHostResponse], error) {
	h, err := s.cordonWrite(ctx, actionCordon, req.Msg.GetHost(), req.Msg.GetReason(), true, req.Peer())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&adminv1.CordonHostResponse{Host: h}), nil
}

func (s *Service) UncordonHost(ctx context.Context, req *connect.Request[adminv1.UncordonHostRequest]) (*connect.Response[adminv1.UncordonHostResponse], error) {
	h, err := s.cordonWrite(ctx, actionUncordon, req.Msg.GetHost(), "", false, req.Peer())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&adminv1.UncordonHostResponse{Host: h}), nil
}

// cordonWrite is one gated, logged and counted cordon change; it answers
// the host as it is afterwards.
func (s *Service) cordonWrite(ctx context.Context, action, host, reason string, on bool, p connect.Peer) (*adminv1.Host, error) {
	target := slog.String("host", host)
	a, err := s.allow(ctx, action, target, p)
	if err != nil {
		return nil, err
	}
	err = s.setCordon(host, on, hostRecord{Host: host, Reason: reason, By: a.identity, Since: s.now().UTC()})
	var h *adminv1.Host
	if err == nil {
		s.onCordon()
		h, err = s.host(ctx, host)
	}
	s.done(a, action, target, "", p, err)
	if err != nil {
		return nil, convert.WireError(err)
	}
	return h, nil
}

// setCordon persists the change, then applies it through the backend; if
// the backend refuses (an unknown host), the file is put back. Persisting
// first means a crash in between leaves the file saying what the operator
// asked for, which startup applies.
func (s *Service) setCordon(host string, on bool, rec hostRecord) error {
	hm, ok := s.eng.Backend().(backend.HostMaintainer)
	switch {
	case host == "":
		return &record.Error{Code: record.CodeInvalid, Msg: "host is required (ListHosts names the hosts)"}
	case !ok:
		return &record.Error{Code: record.CodeUnimplemented, Msg: "this backend has no host maintenance: cordon needs hosts the backend places machines on"}
	}
	c := s.cordons
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.byHost
	next := maps.Clone(prev)
	if on {
		next[host] = rec
	} else {
		delete(next, host)
	}
	if err := c.setLocked(next); err != nil {
		return fmt.Errorf("host %s unchanged: saving the cordon file failed: %w", host, err)
	}
	err := hm.SetCordoned(host, on)
	if err == nil {
		return nil
	}
	if rerr := c.setLocked(prev); rerr != nil {
		s.log.Warn("cordon file not restored after a refused cordon change", "host", host, "err", rerr)
	}
	if errors.Is(err, backend.ErrUnknownHost) {
		return &record.Error{Code: record.CodeNotFound, Msg: fmt.Sprintf("no host named %q (ListHosts names the hosts)", host)}
	}
	return fmt.Errorf("host %s: %w", host, err)
}

// applyCordons re-applies the persisted cordons before the service is
// used. A cordon of a host the backend no longer has is kept in the file
// (the host may come back) and logged. It returns how many it applied.
func (s *Service) applyCordons() (applied int) {
	recs := s.cordons.snapshot()
	if len(recs) == 0 {
		return 0
	}
	hm, ok := s.eng.Backend().(backend.HostMaintainer)
	if !ok {
		s.log.Warn("the cordon file names cordoned hosts but this backend has no host maintenance; ignored", "hosts", len(recs))
		return 0
	}
	for host, r := range recs {
		if err := hm.SetCordoned(host, true); err != nil {
			s.log.Warn("persisted cordon not applied", "host", host, "by", r.By, "err", err)
			continue
		}
		s.log.Info("host cordoned (persisted)", "host", host, "by", r.By, "reason", r.Reason, "since", r.Since)
		applied++
	}
	return applied
}

// cordonToProto says who cordoned a cordoned host: the admin API's record,
// else the hosts file.
func cordonToProto(h *adminv1.Host, recs map[string]hostRecord) *adminv1.HostCordon {
	if !h.Cordoned {
		return nil
	}
	r, ok := recs[h.Name]
	if !ok {
		return &adminv1.HostCordon{By: byHostsFile, Reason: "cordoned: true in the hosts file"}
	}
	return &adminv1.HostCordon{Reason: r.Reason, By: r.By, Since: ts(r.Since)}
}
