package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewOpsHandler serves the operational endpoints of --metrics-addr:
// /metrics from the isolated registry, /healthz (the process is alive and
// answering) and /readyz (200 only while Status is ready; it turns 503 the
// moment shutdown begins, before in-flight RPCs are drained).
func NewOpsHandler(m *Metrics, status *Status) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if err := status.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// OpsServer is the --metrics-addr server. A port that cannot be bound is
// logged loudly and otherwise ignored: metrics are an aid, and several
// providers run side by side under the conformance harness.
type OpsServer struct {
	srv *http.Server
	ln  net.Listener
}

// StartOps binds addr and serves h in the background. It returns nil when
// addr is empty (disabled) or cannot be bound.
func StartOps(addr string, h http.Handler, log *slog.Logger) *OpsServer {
	if addr == "" {
		log.Info("metrics server disabled (--metrics-addr is empty)")
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("METRICS SERVER NOT STARTED: cannot bind --metrics-addr; serving the API without /metrics, /healthz and /readyz",
			slog.String("metrics_addr", addr), slog.Any("error", err))
		return nil
	}
	o := &OpsServer{
		srv: &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes},
		ln:  ln,
	}
	go func() {
		if err := o.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", slog.Any("error", err))
		}
	}()
	log.Info("metrics server listening", slog.String("metrics_addr", ln.Addr().String()))
	return o
}

// Addr is the bound address; nil-safe.
func (o *OpsServer) Addr() net.Addr {
	if o == nil {
		return nil
	}
	return o.ln.Addr()
}

// Shutdown stops the server; nil-safe.
func (o *OpsServer) Shutdown(ctx context.Context) error {
	if o == nil {
		return nil
	}
	return o.srv.Shutdown(ctx)
}
