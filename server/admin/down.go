package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/convert"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

const (
	actionDown = "down"
	actionUp   = "up"
)

// The host's one-word state (Host.state), the most telling first.
const (
	stateDown        = "down"
	stateUnreachable = "unreachable"
	stateCordoned    = "cordoned"
	stateUp          = "up"
)

func (s *Service) DeclareHostDown(ctx context.Context, req *connect.Request[adminv1.DeclareHostDownRequest]) (*connect.Response[adminv1.DeclareHostDownResponse], error) {
	h, err := s.downWrite(ctx, actionDown, req.Msg.GetHost(), req.Msg.GetReason(), true, req.Peer())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&adminv1.DeclareHostDownResponse{Host: h}), nil
}

func (s *Service) DeclareHostUp(ctx context.Context, req *connect.Request[adminv1.DeclareHostUpRequest]) (*connect.Response[adminv1.DeclareHostUpResponse], error) {
	h, err := s.downWrite(ctx, actionUp, req.Msg.GetHost(), "", false, req.Peer())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&adminv1.DeclareHostUpResponse{Host: h}), nil
}

// downWrite is one gated, logged and counted change of a host's down
// declaration; it answers the host as it is afterwards. Beside the admin
// write line every change that took effect is a WARN line: a declaration
// lets the provider fail machines and act as if the host's guests were
// gone, so it must stand out in the log.
func (s *Service) downWrite(ctx context.Context, action, host, reason string, down bool, p connect.Peer) (*adminv1.Host, error) {
	target := slog.String("host", host)
	a, err := s.allow(ctx, action, target, p)
	if err != nil {
		return nil, err
	}
	rec := hostRecord{Host: host, Reason: strings.TrimSpace(reason), By: a.identity, Since: s.now().UTC()}
	prev, err := s.setDown(host, down, rec)
	var h *adminv1.Host
	if err == nil {
		s.onCordon()
		h, err = s.host(ctx, host)
	}
	s.done(a, action, target, "", p, err)
	if err != nil {
		return nil, convert.WireError(err)
	}
	s.logDown(h, down, rec, prev)
	return h, nil
}

// DeclareDown declares host down on the provider's own authority, with
// by as the declarer (hostfence.By for a fence command that succeeded):
// persisted, applied and logged as DeclareHostDown's are, and counted in
// admin_writes_total under the label by. No caller is checked: the
// process itself asserts it, after positive evidence.
func (s *Service) DeclareDown(ctx context.Context, host, reason, by string) error {
	rec := hostRecord{Host: host, Reason: strings.TrimSpace(reason), By: by, Since: s.now().UTC()}
	prev, err := s.setDown(host, true, rec)
	if err != nil {
		s.writes.WithLabelValues(actionDown, "error", by).Inc()
		return err
	}
	s.onCordon()
	s.writes.WithLabelValues(actionDown, "ok", by).Inc()
	h, err := s.host(ctx, host)
	if err != nil || h == nil {
		h = &adminv1.Host{Name: host}
	}
	s.logDown(h, true, rec, prev)
	return nil
}

// logDown writes the WARN line of a declaration or its end.
func (s *Service) logDown(h *adminv1.Host, down bool, rec, prev hostRecord) {
	zone := h.GetZone()
	if down {
		s.log.Warn("host declared down", "host", rec.Host, "zone", zone, "reason", rec.Reason, "by", rec.By)
		return
	}
	if prev.Host == "" {
		return // it was not declared down: nothing ended
	}
	s.log.Warn("host declared up", "host", rec.Host, "zone", zone, "by", rec.By,
		"declared_by", prev.By, "declared_reason", prev.Reason, "declared_since", prev.Since)
}

// setDown checks the request, persists the change, then applies it
// through the backend; if the backend refuses (an unknown host), the
// file is put back. Persisting first means a crash in between leaves the
// file saying what the operator asked for, which startup applies. It
// returns the record the host had before ("" Host: none).
func (s *Service) setDown(host string, down bool, rec hostRecord) (hostRecord, error) {
	hd, ok := s.eng.Backend().(backend.HostDownDeclarer)
	switch {
	case host == "":
		return hostRecord{}, &record.Error{Code: record.CodeInvalid, Msg: "host is required (ListHosts names the hosts)"}
	case down && rec.Reason == "":
		return hostRecord{}, &record.Error{Code: record.CodeInvalid,
			Msg: "reason is required: say how the host is known to be off or fenced (e.g. \"powered off via IPMI, ticket 123\")"}
	case !ok:
		return hostRecord{}, &record.Error{Code: record.CodeUnimplemented,
			Msg: "this backend cannot declare a host down: it needs hosts the backend places machines on"}
	}
	c := s.downs
	c.mu.Lock()
	defer c.mu.Unlock()
	before := c.byHost
	old, had := before[host]
	next := maps.Clone(before)
	if down {
		if had {
			rec.Since = old.Since // a repeated declaration keeps when it began
		}
		next[host] = rec
	} else {
		delete(next, host)
	}
	if err := c.setLocked(next); err != nil {
		return hostRecord{}, fmt.Errorf("host %s unchanged: saving the down file failed: %w", host, err)
	}
	err := hd.SetDown(host, down, rec.Reason)
	if err == nil {
		return old, nil
	}
	if rerr := c.setLocked(before); rerr != nil {
		s.log.Warn("down file not restored after a refused down declaration change", "host", host, "err", rerr)
	}
	if errors.Is(err, backend.ErrUnknownHost) {
		return hostRecord{}, &record.Error{Code: record.CodeNotFound, Msg: fmt.Sprintf("no host named %q (ListHosts names the hosts)", host)}
	}
	return hostRecord{}, fmt.Errorf("host %s: %w", host, err)
}

// applyDowns re-applies the persisted down declarations before the
// service is used. A declaration of a host the backend no longer has is
// kept in the file (the host may come back) and logged. It returns how
// many it applied.
func (s *Service) applyDowns() (applied int) {
	recs := s.downs.snapshot()
	if len(recs) == 0 {
		return 0
	}
	hd, ok := s.eng.Backend().(backend.HostDownDeclarer)
	if !ok {
		s.log.Warn("the down file names hosts declared down but this backend cannot declare a host down; ignored", "hosts", len(recs))
		return 0
	}
	return applyDownRecords(hd, recs, s.log, s.log.Warn, "host declared down (persisted)")
}

// applyDownRecords declares each host of recs down on hd, saying so with
// say(msg) each, and returns how many it applied.
func applyDownRecords(hd backend.HostDownDeclarer, recs map[string]hostRecord, log *slog.Logger, say func(string, ...any), msg string) (applied int) {
	for host, r := range recs {
		if err := hd.SetDown(host, true, r.Reason); err != nil {
			log.Warn("persisted down declaration not applied", "host", host, "by", r.By, "err", err)
			continue
		}
		say(msg, "host", host, "by", r.By, "reason", r.Reason, "since", r.Since)
		applied++
	}
	return applied
}

// downToProto says who declared a declared-down host down, when and why:
// the admin API's record, else (a declaration the backend holds that the
// file does not) the backend's reason alone.
func downToProto(h backend.HostStatus, name string, recs map[string]hostRecord) *adminv1.HostDown {
	if !h.Down {
		return nil
	}
	r, ok := recs[name]
	if !ok {
		return &adminv1.HostDown{Reason: h.DownReason}
	}
	return &adminv1.HostDown{Reason: r.Reason, By: r.By, Since: ts(r.Since)}
}

// hostState is Host.state: a declaration first, then the connection,
// then the cordon.
func hostState(h *adminv1.Host) string {
	switch {
	case h.Down != nil:
		return stateDown
	case !h.Connected:
		return stateUnreachable
	case h.Cordoned:
		return stateCordoned
	}
	return stateUp
}

// ApplyPersistedDowns applies the down declarations kept in path to be,
// before the engine starts: its first reconcile pass must already see a
// host declared down as such (listed with nothing running, its domains
// fenced), not as a host whose copies count. The admin service applies
// them again when it is built (idempotent). A backend that cannot declare
// hosts down ignores them (logged); a file that cannot be read is an
// error naming it.
func ApplyPersistedDowns(be backend.Backend, path string, log *slog.Logger) error {
	downs, err := loadHostFile(path, downFile)
	if err != nil {
		return fmt.Errorf("admin down declarations %s: %w", path, err)
	}
	if hd, ok := be.(backend.HostDownDeclarer); ok {
		applyDownRecords(hd, downs.snapshot(), log, log.Info, "persisted down declaration applied before the engine's first pass")
	}
	return nil
}
