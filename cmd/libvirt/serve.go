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

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/admin/ui"
	"github.com/bigfleet/libvirt-provider/server/callerid"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// serve wires backend → capacity → store → engine → server, serves until
// ctx ends, then shuts down in the order that loses nothing: not-ready and
// refusing mutations first, then (within --shutdown-timeout) letting
// in-flight transitions finish, then draining RPCs, then closing the store.
// Each step is a method of daemon, in the order it runs.
func serve(ctx context.Context, cfg config, log *slog.Logger, stdout io.Writer) error {
	d := &daemon{cfg: cfg, log: log, start: time.Now()}
	// The engine, the store, the host gauges and the backend close in the
	// reverse of their opening, whatever step returns.
	defer d.closeAll()
	if err := d.loadTLS(ctx); err != nil {
		return err
	}
	if cfg.LeaderElect {
		e, err := newElection(ctx, d)
		if err != nil {
			return err
		}
		d.election = e
		if err := setAsideState(cfg.State, log); err != nil {
			return err
		}
	}
	seed, err := d.openState(ctx)
	if err != nil {
		return err
	}
	d.gateChanges()
	if err := d.startEngine(ctx, seed); err != nil {
		return err
	}
	if err := d.buildHandler(); err != nil {
		return err
	}
	if err := d.startFencer(ctx); err != nil {
		return err
	}
	if err := d.listen(ctx); err != nil {
		return err
	}
	d.logServing(stdout)
	if d.election != nil {
		d.campaign(ctx)
	}
	return d.waitAndShutdown(ctx)
}

// daemon is what serve has opened and started, step by step.
type daemon struct {
	cfg   config
	log   *slog.Logger
	start time.Time

	mainTLS    *server.ServerTLS
	be         backend.Backend
	slots      int
	engPtr     atomic.Pointer[lifecycle.Engine]
	metrics    *server.Metrics
	hostGauges *server.HostCache
	st         *trackedStore
	// seed is the capacity model's slots, kept by a standby until it
	// builds its engine at takeover.
	seed []record.Machine

	status        *server.Status
	guard         *callerid.Guard
	adm           *admin.Service
	hopts         server.Options
	lis, adminLis *server.Listener
	adminSecurity server.Security
	ops           *server.OpsServer
	serveErr      chan error
	election      *election // nil without --leader-elect

	closers []func() // closeAll runs them newest first
}

func (d *daemon) onClose(f func()) { d.closers = append(d.closers, f) }

func (d *daemon) closeAll() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// loadTLS builds the one TLS configuration every listener uses.
func (d *daemon) loadTLS(ctx context.Context) error {
	cfg := d.cfg
	// One builder for every listener: it refuses bad files naming the flag,
	// and its reloader follows Secret updates, so rotated certificates
	// apply to new connections without a restart.
	mainTLS, err := server.TLSFiles{Cert: cfg.TLSCert, Key: cfg.TLSKey, CA: cfg.TLSCA,
		Interval: cfg.TLSReloadInterval, Logger: d.log.With(slog.String("component", "tls"))}.Load()
	if err != nil {
		return err
	}
	go mainTLS.Run(ctx)
	d.mainTLS = mainTLS
	return nil
}

// openState opens the backend, reads the capacity flags into the slots
// the engine offers (returned, not kept: the seed must not outlive the
// engine's start), registers the metrics and opens the store.
func (d *daemon) openState(ctx context.Context) ([]record.Machine, error) {
	be, err := openBackend(ctx, d.cfg, d.log)
	if err != nil {
		return nil, err
	}
	d.be = be
	d.onClose(func() { be.Close() })
	// Before the engine's first pass: a host declared down must never be
	// listed as a host whose copies count (issue 38).
	if err := admin.ApplyPersistedDowns(be, admin.DownFileFor(d.cfg.State), d.log); err != nil {
		return nil, fmt.Errorf("--state %s: %w", d.cfg.State, err)
	}
	seed, err := buildSeed(d.cfg, be.Zones())
	if err != nil {
		return nil, err
	}
	d.slots = len(seed)

	d.metrics = server.NewMetrics(counts(&d.engPtr))
	d.metrics.RegisterHostsUp(hostsUp(be))
	d.metrics.RegisterHostDomainTypes(domainTypes(be))
	// The host gauges serve a snapshot read after each reconcile pass, at
	// start and after each cordon change: a scrape never calls libvirt.
	d.hostGauges = d.metrics.RegisterHostCapacity(be.Hosts)
	d.onClose(func() { d.hostGauges.Close() }) // before be.Close
	d.hostGauges.Refresh()
	st, err := openStore(d.cfg, d.metrics, d.log)
	if err != nil {
		return nil, err
	}
	d.st = st
	d.onClose(func() { st.Close() }) // after engine.Close
	return seed, nil
}

// startEngine starts the lifecycle engine on the store and the backend
// and waits (briefly) for the first listings of the ready zones. Under
// --leader-elect it only keeps the seed: the engine is built at takeover
// (takeover.go), once the shared journal is in the store.
func (d *daemon) startEngine(ctx context.Context, seed []record.Machine) error {
	d.metrics.RegisterShardLimit(d.engine().ShardLimit)
	// a no-op after Shutdown, and nothing before a standby leads
	d.onClose(func() {
		if eng := d.engPtr.Load(); eng != nil {
			eng.Close()
		}
	})
	if d.election != nil {
		d.seed = seed
		return nil
	}
	eng, err := d.newEngine(ctx, seed, d.st)
	if err != nil {
		return err
	}
	eng.Start(context.WithoutCancel(ctx))
	waitFirstListing(ctx, eng, d.log)
	return nil
}

// newEngine builds the engine on st from the seed, publishes it and gives
// the fake backend its VMs back.
func (d *daemon) newEngine(ctx context.Context, seed []record.Machine, st record.Store) (*lifecycle.Engine, error) {
	cfg := d.cfg
	var moves lifecycle.MoveGuard
	if d.election != nil {
		moves = d.election.cfg.Quiet
	}
	eng, err := lifecycle.New(lifecycle.Config{
		Provider: cfg.Provider, Seed: seed,
		CreateTimeout: cfg.CreateTimeout, ConfigureTimeout: cfg.ConfigureTimeout,
		DrainTimeout: cfg.DrainTimeout, DeleteTimeout: cfg.DeleteTimeout,
		MigrateTimeout:       cfg.MigrateTimeout,
		MoveGuard:            moves,
		ReconcileInterval:    cfg.ReconcileInterval,
		ReconcileConcurrency: cfg.ReconcileConcurrency,
		RestartBackoff:       cfg.RestartBackoff,
		RestartMaxTries:      cfg.RestartMaxTries,
		RestartDisabled:      cfg.RestartMaxTries == 0,
		Logger:               d.log.With(slog.String("component", "lifecycle")),
		Observer:             d.metrics,
	}, st, d.be)
	if err != nil {
		return nil, fmt.Errorf("start engine: %w", err)
	}
	d.engPtr.Store(eng)
	// Loading a large state file leaves the decoder's garbage behind; hand
	// it back now rather than carry a startup-sized heap for hours.
	debug.FreeOSMemory()
	if err := restoreFakeVMs(ctx, d.be, eng); err != nil {
		return nil, err
	}
	return eng, nil
}

// engine is what the handlers and the admin API call: the engine itself
// once built; before (a standby), a stand-in that answers Unavailable.
func (d *daemon) engine() lateEngine { return lateEngine{p: &d.engPtr, be: d.be} }

// buildHandler makes the readiness status, the caller identity guard,
// the admin service and the options of the CapacityProvider handler.
func (d *daemon) buildHandler() error {
	d.status = server.NewStatus()
	d.status.AddProbe(d.st.ready)
	if d.election != nil {
		d.status.AddProbe(d.election.gate.Ready) // only the acting leader is ready
		d.election.registerLeaderGauge(d.metrics.Registry)
	}
	guard, err := newGuard(d.cfg, d.metrics, d.log)
	if err != nil {
		return err
	}
	d.guard = guard
	var hostShare func(string, []byte) error
	if d.election != nil {
		hostShare = hostJournal(&d.election.shared)
	}
	adm, err := newAdmin(d.cfg, d.engine(), d.metrics, d.log, ui.Handler(), d.hostGauges.Refresh, guard, hostShare)
	if err != nil {
		return err
	}
	d.adm = adm
	d.hopts = server.Options{
		Engine: d.engine(), Logger: d.log.With(slog.String("component", "rpc")),
		Metrics: d.metrics, Status: d.status, Reflection: d.cfg.Reflection, Guard: guard,
	}
	if d.election != nil {
		d.hopts.Gate = d.election.gate
	}
	return nil
}

// listen binds the admin listener (if any), --addr and the ops listener,
// and starts serving on them.
func (d *daemon) listen(ctx context.Context) error {
	adminLis, adminSecurity, err := listenAdmin(ctx, d.cfg, d.hopts, d.adm, d.log)
	if err != nil {
		return err
	}
	if adminLis == nil { // the admin API and page share --addr
		d.hopts.ReflectionNames = []string{admin.ServiceName}
		d.hopts.Mount = []func(*http.ServeMux, connect.HandlerOption){d.adm.Mount}
		adminSecurity = d.mainTLS.Security
	}
	lis, err := server.Listen(d.cfg.Addr, server.NewHandler(d.hopts), d.mainTLS.Config, d.log)
	if err != nil {
		unbind(adminLis)
		return err
	}
	d.lis, d.adminLis, d.adminSecurity = lis, adminLis, adminSecurity
	d.ops = server.StartOps(d.cfg.MetricsAddr, server.NewOpsHandler(d.metrics, d.status), d.log)
	d.serveErr = make(chan error, 2)
	go func() { d.serveErr <- lis.Serve() }()
	if adminLis != nil {
		go func() { d.serveErr <- adminLis.Serve() }()
	}
	return nil
}

// logServing writes the serving line and tells a human where to point a
// client.
func (d *daemon) logServing(stdout io.Writer) {
	cfg, lis, adminLis := d.cfg, d.lis, d.adminLis
	d.log.Info("serving",
		slog.String("addr", lis.Addr().String()), slog.String("security", string(d.mainTLS.Security)),
		slog.String("caller_identity", callerDesc(cfg)),
		slog.String("provider", cfg.Provider), slog.Any("zones", d.be.Zones()), slog.Int("slots", d.slots),
		slog.String("state", stateDesc(cfg.State)), slog.String("cordons", cordonsDesc(cfg.State)),
		slog.Bool("reflection", cfg.Reflection),
		slog.Bool("admin_write", cfg.AdminWrite), slog.String("admin_clients", cfg.adminClients()),
		slog.String("admin_addr", addrOf(adminLis, lis)), slog.String("admin_security", string(d.adminSecurity)),
		slog.String("startup", time.Since(d.start).Round(time.Millisecond).String()))
	printBanner(stdout, lis.Addr(), d.mainTLS.Security)
	if adminLis != nil {
		fmt.Fprintf(stdout, "admin API and page on %s (%s)\n", adminLis.Addr(), d.adminSecurity)
	}
}

// waitAndShutdown serves until ctx ends or a listener fails, then shuts
// down: not ready and refusing mutations, in-flight transitions within
// --shutdown-timeout, then the RPCs still in flight. It returns the
// listener's error, if that is what ended serving.
func (d *daemon) waitAndShutdown(ctx context.Context) error {
	cfg, log := d.cfg, d.log
	var err error
	select {
	case <-ctx.Done():
		log.Info("shutdown requested: not ready, refusing mutations, letting in-flight RPCs and transitions finish",
			slog.String("bound", cfg.ShutdownTimeout.String()))
	case err = <-d.serveErr:
		log.Error("listener failed; shutting down", slog.Any("error", err))
	case err = <-d.lostChan(): // the work context is cancelled already
		log.Error("leader lease lost: refusing calls, cancelling in-flight work, exiting", slog.Any("error", err))
	}
	d.status.BeginShutdown()
	// A standby that never led has no engine: nothing to stop.
	eng := d.engPtr.Load()
	if eng != nil {
		eng.StopAccepting() // from here a mutation is Unavailable ("shutting down"), never half-accepted
	}
	d.adm.Close() // end admin watch streams: an open admin page must not hold the drain
	// In-flight transitions (a Configure's bootstrap hook, say) get up to
	// the bound to finish, while the listener stays open so clients still
	// connected can read their outcome and are told why mutations fail.
	// Only past the bound is anything cancelled.
	shutdownCtx, cancel := context.WithTimeout(d.workContext(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if eng != nil {
		eng.Shutdown(shutdownCtx)
	}
	// Then the RPCs still in flight (reads and refusals, milliseconds each)
	// drain within what is left of the bound, with a small floor so a bound
	// used up by transitions does not cut them mid-reply.
	rpcCtx, rpcCancel := drainContext(shutdownCtx)
	defer rpcCancel()
	for _, l := range []*server.Listener{d.lis, d.adminLis} {
		if l == nil {
			continue
		}
		if derr := l.Shutdown(rpcCtx); derr != nil {
			log.Warn("in-flight RPCs cut off at the shutdown bound", slog.String("addr", l.Addr().String()), slog.Any("error", derr))
		}
	}
	_ = d.ops.Shutdown(rpcCtx)
	d.resign() // all work stopped: release the Lease, if held
	log.Info("stopped")
	return err // then serve's closeAll: store Close, backend Close (engine.Close is a no-op after Shutdown)
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
		return "any (--caller-identity=any: every certificate the CA signed may make every call, admin reads included; admin writes still need --admin-write and --admin-clients)"
	}
	return "bigfleet (each call bound to its certificate's bigfleet:// URI SAN; admin reads need bigfleet://admin or bigfleet://readonly)"
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
