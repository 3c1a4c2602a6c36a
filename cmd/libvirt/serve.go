package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/server"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/admin/ui"
	"github.com/bigfleet/libvirt-provider/server/callerid"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
)

// serve wires backend → capacity → store → engine → server, serves until
// ctx ends, then shuts down in the order that loses nothing: not-ready and
// refusing mutations first, then (within --shutdown-timeout) letting
// in-flight transitions finish, then draining RPCs, then closing the store.
func serve(ctx context.Context, cfg config, log *slog.Logger, stdout io.Writer) error {
	start := time.Now()
	// One builder for every listener: it refuses bad files naming the flag,
	// and its reloader follows Secret updates, so rotated certificates
	// apply to new connections without a restart.
	mainTLS, err := server.TLSFiles{Cert: cfg.TLSCert, Key: cfg.TLSKey, CA: cfg.TLSCA,
		Interval: cfg.TLSReloadInterval, Logger: log.With(slog.String("component", "tls"))}.Load()
	if err != nil {
		return err
	}
	go mainTLS.Run(ctx)
	be, err := openBackend(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer be.Close()
	seed, err := buildSeed(cfg, be.Zones())
	if err != nil {
		return err
	}
	slots := len(seed) // seed itself must not outlive the engine's start

	var engPtr atomic.Pointer[lifecycle.Engine]
	metrics := server.NewMetrics(counts(&engPtr))
	metrics.RegisterHostsUp(hostsUp(be))
	metrics.RegisterHostDomainTypes(domainTypes(be))
	// The host gauges serve a snapshot read after each reconcile pass, at
	// start and after each cordon change: a scrape never calls libvirt.
	hostGauges := metrics.RegisterHostCapacity(be.Hosts)
	defer hostGauges.Close() // before be.Close, deferred above
	hostGauges.Refresh()
	st, err := openStore(cfg, metrics, log)
	if err != nil {
		return err
	}
	defer st.Close() // after engine.Close, deferred below
	eng, err := lifecycle.New(lifecycle.Config{
		Provider: cfg.Provider, Seed: seed,
		CreateTimeout: cfg.CreateTimeout, ConfigureTimeout: cfg.ConfigureTimeout,
		DrainTimeout: cfg.DrainTimeout, DeleteTimeout: cfg.DeleteTimeout,
		MigrateTimeout:       cfg.MigrateTimeout,
		ReconcileInterval:    cfg.ReconcileInterval,
		ReconcileConcurrency: cfg.ReconcileConcurrency,
		RestartBackoff:       cfg.RestartBackoff,
		RestartMaxTries:      cfg.RestartMaxTries,
		RestartDisabled:      cfg.RestartMaxTries == 0,
		Logger:               log.With(slog.String("component", "lifecycle")),
		Observer:             metrics,
	}, st, be)
	if err != nil {
		return fmt.Errorf("start engine: %w", err)
	}
	engPtr.Store(eng)
	metrics.RegisterShardLimit(eng.ShardLimit)
	// Loading a large state file leaves the decoder's garbage behind; hand
	// it back now rather than carry a startup-sized heap for hours.
	debug.FreeOSMemory()
	defer eng.Close()
	if err := restoreFakeVMs(ctx, be, eng); err != nil {
		return err
	}
	eng.Start(context.WithoutCancel(ctx))
	waitFirstListing(ctx, eng, log)

	status := server.NewStatus()
	status.AddProbe(st.ready)
	guard, err := newGuard(cfg, metrics, log)
	if err != nil {
		return err
	}
	adm, err := newAdmin(cfg, eng, metrics, log, ui.Handler(), hostGauges.Refresh, guard)
	if err != nil {
		return err
	}
	hopts := server.Options{
		Engine: eng, Logger: log.With(slog.String("component", "rpc")),
		Metrics: metrics, Status: status, Reflection: cfg.Reflection, Guard: guard,
	}
	adminLis, adminSecurity, err := listenAdmin(ctx, cfg, hopts, adm, log)
	if err != nil {
		return err
	}
	if adminLis == nil { // the admin API and page share --addr
		hopts.ReflectionNames = []string{admin.ServiceName}
		hopts.Mount = []func(*http.ServeMux, connect.HandlerOption){adm.Mount}
		adminSecurity = mainTLS.Security
	}
	lis, err := server.Listen(cfg.Addr, server.NewHandler(hopts), mainTLS.Config, log)
	if err != nil {
		unbind(adminLis)
		return err
	}
	ops := server.StartOps(cfg.MetricsAddr, server.NewOpsHandler(metrics, status), log)
	serveErr := make(chan error, 2)
	go func() { serveErr <- lis.Serve() }()
	if adminLis != nil {
		go func() { serveErr <- adminLis.Serve() }()
	}

	log.Info("serving",
		slog.String("addr", lis.Addr().String()), slog.String("security", string(mainTLS.Security)),
		slog.String("caller_identity", callerDesc(cfg)),
		slog.String("provider", cfg.Provider), slog.Any("zones", be.Zones()), slog.Int("slots", slots),
		slog.String("state", stateDesc(cfg.State)), slog.String("cordons", cordonsDesc(cfg.State)),
		slog.Bool("reflection", cfg.Reflection),
		slog.Bool("admin_write", cfg.AdminWrite), slog.String("admin_clients", cfg.adminClients()),
		slog.String("admin_addr", addrOf(adminLis, lis)), slog.String("admin_security", string(adminSecurity)),
		slog.String("startup", time.Since(start).Round(time.Millisecond).String()))
	printBanner(stdout, lis.Addr(), mainTLS.Security)
	if adminLis != nil {
		fmt.Fprintf(stdout, "admin API and page on %s (%s)\n", adminLis.Addr(), adminSecurity)
	}

	select {
	case <-ctx.Done():
		log.Info("shutdown requested: not ready, refusing mutations, letting in-flight RPCs and transitions finish",
			slog.String("bound", cfg.ShutdownTimeout.String()))
	case err = <-serveErr:
		log.Error("listener failed; shutting down", slog.Any("error", err))
	}
	status.BeginShutdown()
	eng.StopAccepting() // from here a mutation is Unavailable ("shutting down"), never half-accepted
	adm.Close()         // end admin watch streams: an open admin page must not hold the drain
	// In-flight transitions (a Configure's bootstrap hook, say) get up to
	// the bound to finish, while the listener stays open so clients still
	// connected can read their outcome and are told why mutations fail.
	// Only past the bound is anything cancelled.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	eng.Shutdown(shutdownCtx)
	// Then the RPCs still in flight (reads and refusals, milliseconds each)
	// drain within what is left of the bound, with a small floor so a bound
	// used up by transitions does not cut them mid-reply.
	rpcCtx, rpcCancel := drainContext(shutdownCtx)
	defer rpcCancel()
	for _, l := range []*server.Listener{lis, adminLis} {
		if l == nil {
			continue
		}
		if derr := l.Shutdown(rpcCtx); derr != nil {
			log.Warn("in-flight RPCs cut off at the shutdown bound", slog.String("addr", l.Addr().String()), slog.Any("error", derr))
		}
	}
	_ = ops.Shutdown(rpcCtx)
	log.Info("stopped")
	return err // deferred: store Close, backend Close (engine.Close is a no-op after Shutdown)
}

// newGuard binds CapacityProvider calls to their certificates when the
// mode is bigfleet (nil otherwise: nothing to check).
func newGuard(cfg config, metrics *server.Metrics, log *slog.Logger) (*callerid.Guard, error) {
	if cfg.callerMode() != callerBigFleet {
		return nil, nil
	}
	return callerid.New(callerid.Options{Logger: log.With(slog.String("component", "identity")),
		Registerer: metrics.Registry, RequestID: server.RequestID})
}

// callerDesc is the startup line's caller_identity: the mode, and why the
// checks are skipped when they are.
func callerDesc(cfg config) string {
	switch cfg.callerMode() {
	case callerOff:
		return "off (no client certificates on this transport: every caller may make every call)"
	case callerAny:
		return "any (--caller-identity=any: every certificate the CA signed may make every call)"
	}
	return "bigfleet (each call bound to its certificate's bigfleet:// URI SAN)"
}

// minRPCDrain is the floor of the RPC drain after transitions used the
// shutdown bound.
const minRPCDrain = 2 * time.Second

// drainContext is the RPC drain's context: parent's deadline, but at least
// minRPCDrain from now.
func drainContext(parent context.Context) (context.Context, context.CancelFunc) {
	deadline, _ := parent.Deadline()
	return context.WithDeadline(context.WithoutCancel(parent), later(deadline, time.Now().Add(minRPCDrain)))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// unbind releases a listener that never served: Serve after Shutdown
// closes the socket and returns at once.
func unbind(l *server.Listener) {
	if l != nil {
		_ = l.Shutdown(context.Background())
		_ = l.Serve()
	}
}

// addrOf is where the admin API is served: its own listener, or --addr.
func addrOf(adminLis, lis *server.Listener) string {
	if adminLis != nil {
		return adminLis.Addr().String()
	}
	return lis.Addr().String()
}

func stateDesc(path string) string {
	if path == "" {
		return "memory (lost on exit)"
	}
	return path
}

// printBanner tells a human where to point a client, with a command that
// works as pasted (loopback for wildcard binds).
func printBanner(w io.Writer, addr net.Addr, security server.Security) {
	host := "127.0.0.1"
	port := "9000"
	if tcp, ok := addr.(*net.TCPAddr); ok {
		port = fmt.Sprint(tcp.Port)
		if !tcp.IP.IsUnspecified() {
			host = tcp.IP.String()
		}
	}
	hp := net.JoinHostPort(host, port)
	scheme, extra := "http", ""
	if security != server.SecurityInsecure {
		scheme, extra = "https", " --cacert CA.pem"
		if security == server.SecurityMTLS {
			extra += " --cert CLIENT.pem --key CLIENT-KEY.pem"
		}
	}
	fmt.Fprintf(w, "libvirt provider listening on %s (%s)\n", hp, security)
	fmt.Fprintf(w, "try: curl -s%s -H 'Content-Type: application/json' -d '{}' %s://%s/bigfleet.v1alpha1.CapacityProvider/List\n",
		extra, scheme, hp)
}

// firstListingWait bounds the wait for the first listings before serving:
// a host that is ready but slow to list must not hold the start either.
const firstListingWait = 5 * time.Second

// waitFirstListing lets the zones whose hosts are ready be listed (which
// rebuilds their machines, bindings and fence marks after a lost state
// file) before clients are served, so a healthy start answers every
// mutation at once. A host that is down or still on its first connection
// attempt is not waited for: reconcile lists its zone when it answers, and
// until then its mutations wait briefly or get Unavailable (lifecycle's
// listed.go).
func waitFirstListing(ctx context.Context, eng *lifecycle.Engine, log *slog.Logger) {
	wctx, cancel := context.WithTimeout(ctx, firstListingWait)
	defer cancel()
	start := time.Now()
	if !eng.WaitReadyZonesListed(wctx) {
		log.Warn("zones not listed yet; serving anyway (their mutations wait for the listing or get Unavailable)",
			"waited", time.Since(start).Round(time.Millisecond).String())
	}
}
