package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/server"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/callerid"
)

// validateAdmin refuses admin setups that would let writes through without
// a verified caller: admin writes destroy VMs, so they need mutual TLS on
// the listener that serves them and a non-empty --admin-clients.
func (c *config) validateAdmin() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	clients, err := admin.ParseClients(c.AdminClients)
	if err != nil {
		bad("%v", err)
	}
	if c.AdminTLSCA != "" && c.AdminAddr == "" {
		bad("--admin-tls-ca needs --admin-addr: it is the client CA of the admin listener only")
	}
	if c.AdminAddr != "" && c.AdminAddr == c.Addr && !strings.HasSuffix(c.Addr, ":0") {
		bad("--admin-addr must differ from --addr (%s)", c.Addr)
	}
	if !c.AdminWrite {
		if len(clients.Patterns()) > 0 {
			bad("--admin-clients has no effect without --admin-write")
		}
		return errs
	}
	if c.adminCA() == "" {
		bad("--admin-write requires mutual TLS on the listener serving the admin API: set --tls-ca (or --admin-addr with --admin-tls-ca), so writers are known by their client certificate")
	}
	return errs
}

// adminClients is --admin-clients, or BigFleet's admin identity when it is
// empty (ADR-0060's bigfleet://admin; --admin-write needs mTLS, so a
// certificate carries it).
func (c *config) adminClients() string {
	if strings.TrimSpace(c.AdminClients) == "" && c.AdminWrite {
		return admin.DefaultAdminClient
	}
	return c.AdminClients
}

// adminCA is the client CA of the listener that serves the admin API: its
// own (--admin-tls-ca) on --admin-addr, else the main listener's.
func (c *config) adminCA() string {
	if c.AdminAddr != "" && c.AdminTLSCA != "" {
		return c.AdminTLSCA
	}
	return c.TLSCA
}

// newAdmin builds the admin service from the flags (validated already).
// The cordons and down declarations made through it are kept beside
// --state, so a restart keeps a host under maintenance out of placement
// and a fenced host declared down; without --state they live in memory,
// like the state itself. onCordon runs after each cordon or down change.
// guard (nil unless --caller-identity=bigfleet) holds the admin reads to
// bigfleet://admin and bigfleet://readonly, on --addr and --admin-addr
// alike: both mount this one service.
func newAdmin(cfg config, eng admin.Engine, metrics *server.Metrics, log *slog.Logger, page http.Handler, onCordon func(), guard *callerid.Guard, hostJournal func(string, []byte) error) (*admin.Service, error) {
	clients, err := admin.ParseClients(cfg.adminClients())
	if err != nil {
		return nil, err
	}
	adm, err := admin.New(admin.Options{Engine: eng, AllowWrite: cfg.AdminWrite, Clients: clients,
		Logger: log.With(slog.String("component", "admin")), Registerer: metrics.Registry, UI: page,
		CordonFile: admin.CordonFileFor(cfg.State), DownFile: admin.DownFileFor(cfg.State), OnCordon: onCordon,
		CallerMode: cfg.callerMode(), Refusals: refusalsOf(guard), Guard: guard, HostJournal: hostJournal})
	if err != nil && cfg.State != "" {
		// admin.New names the file it could not read.
		return nil, fmt.Errorf("--state %s: %w", cfg.State, err)
	}
	return adm, err
}

// cordonsDesc says where the admin cordons are kept, for the startup log.
func cordonsDesc(state string) string {
	if state == "" {
		return "memory (lost on exit)"
	}
	return admin.CordonFileFor(state)
}

// listenAdmin serves the admin API and page alone on --admin-addr, with the
// shared certificate and the admin client CA, through the same TLS builder
// and listener as --addr. It returns nil when --admin-addr is empty.
func listenAdmin(ctx context.Context, cfg config, opts server.Options, adm *admin.Service, log *slog.Logger) (*server.Listener, server.Security, error) {
	if cfg.AdminAddr == "" {
		return nil, "", nil
	}
	st, err := server.TLSFiles{Cert: cfg.TLSCert, Key: cfg.TLSKey, CA: cfg.adminCA(), CAFlag: adminCAFlag(cfg),
		Interval: cfg.TLSReloadInterval, Logger: log.With(slog.String("component", "tls-admin"))}.Load()
	if err != nil {
		return nil, "", err
	}
	go st.Run(ctx)
	opts.Reflection = false // the admin listener answers the admin API and nothing else
	opts.Mount = []func(*http.ServeMux, connect.HandlerOption){adm.Mount}
	lis, err := server.Listen(cfg.AdminAddr, admin.Only(server.NewHandler(opts)), st.Config, log)
	if err != nil {
		// server.Listen names --addr; this bind is --admin-addr's.
		return nil, "", fmt.Errorf("--admin-addr %s: %w", cfg.AdminAddr, errors.Unwrap(err))
	}
	return lis, st.Security, nil
}

func adminCAFlag(cfg config) string {
	if cfg.AdminTLSCA != "" {
		return "--admin-tls-ca"
	}
	return "--tls-ca"
}

// refusalsOf is what the admin page lists as refused callers (nothing
// without a guard).
func refusalsOf(g *callerid.Guard) func() []callerid.Rejection {
	if g == nil {
		return nil
	}
	return g.Recent
}
