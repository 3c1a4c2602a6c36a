// Package admintest starts a complete in-process provider for tests: the
// lifecycle engine on the fake backend and an in-memory store, served by
// server.NewHandler with the admin API and web page mounted, on a loopback
// listener (h2c, or TLS 1.3 with a throwaway certificate). The admin, CLI
// and browser tests all use it, so they exercise the same wiring as
// cmd/libvirt.
package admintest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/admin/ui"
	"github.com/bigfleet/libvirt-provider/server/callerid"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
	"github.com/bigfleet/libvirt-provider/server/store"
)

// Options shape the test provider. The zero value is a read-only admin API
// over h2c with four SPECULATIVE machines, two per zone.
type Options struct {
	AdminWrite bool
	// Clients is --admin-clients. Empty with AdminWrite: the test cannot
	// present a client certificate (h2c, the browser, the CLI), so every
	// request reaches the server as if over mTLS with a verified
	// certificate named TestCaller (see AsVerifiedCaller), which is listed.
	Clients   string
	TLS       bool
	Machines  int           // 0 → 4
	Fake      fake.Options  // the fake backend's delays and failures
	Heartbeat time.Duration // 0 → admin default
	// Wrap may replace the engine the admin API sees (e.g. to inject a
	// backend with other host URIs).
	Wrap func(*lifecycle.Engine) admin.Engine
	// CordonFile is admin.Options.CordonFile (empty: cordons in memory).
	CordonFile string
	// DownFile is admin.Options.DownFile (empty: down declarations in
	// memory).
	DownFile string
	// OnCordon is admin.Options.OnCordon.
	OnCordon func()
	// Service, when set, receives the admin service (e.g. to Close it).
	Service **admin.Service
	// CallerMode and Refusals are admin.Options' (what the page lists as
	// refused callers).
	CallerMode string
	Refusals   func() []callerid.Rejection
}

// TestCaller is the identity of every caller when Options.Clients is empty.
const TestCaller = "admintest"

// Server is a running provider.
type Server struct {
	URL      string // http://127.0.0.1:port or https://…
	Addr     string // host:port
	Engine   *lifecycle.Engine
	Fake     *fake.Backend
	Registry *prometheus.Registry
	Logs     *SyncBuffer
	// TLSConfig trusts the server's certificate (nil without TLS).
	TLSConfig *tls.Config
}

// SyncBuffer is a goroutine-safe bytes.Buffer for captured logs.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Seed returns n SPECULATIVE slots named m-000…, alternating between the
// fake's default zones.
func Seed(n int) []record.Machine {
	out := make([]record.Machine, n)
	for i := range out {
		zone := fake.DefaultZones[i%len(fake.DefaultZones)]
		out[i] = record.Machine{
			ID: fmt.Sprintf("m-%03d", i), Zone: zone, InstanceType: "small",
			CapacityType: record.CapacityOnDemand, PricePerHour: 0.02,
			Resources:   map[string]string{"cpu": "1", "memory": "1Gi"},
			Allocatable: map[string]string{"cpu": "2", "memory": "2Gi"},
			Labels:      map[string]string{"zone": zone},
			VCPU:        2, MemoryMiB: 2048,
		}
	}
	return out
}

// Start runs a provider until the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Machines == 0 {
		opts.Machines = 4
	}
	logs := &SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	fb := fake.New(opts.Fake)
	eng, err := lifecycle.New(lifecycle.Config{
		Provider: "test-provider", Seed: Seed(opts.Machines), Logger: log,
		CreateTimeout: time.Minute, ConfigureTimeout: time.Minute, DrainTimeout: time.Minute, DeleteTimeout: time.Minute,
	}, store.NewMemory(), fb)
	if err != nil {
		t.Fatal(err)
	}
	eng.Start(context.Background())
	listed, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !eng.WaitFirstReconcile(listed) {
		t.Fatal("no first reconcile within 5s")
	}
	var ae admin.Engine = eng
	if opts.Wrap != nil {
		ae = opts.Wrap(eng)
	}
	metrics := server.NewMetrics(nil)
	aopts := admin.Options{Engine: ae, AllowWrite: opts.AdminWrite, Logger: log,
		Registerer: metrics.Registry, Heartbeat: opts.Heartbeat, UI: ui.Handler(), CordonFile: opts.CordonFile, DownFile: opts.DownFile, OnCordon: opts.OnCordon,
		CallerMode: opts.CallerMode, Refusals: opts.Refusals}
	if aopts.Clients, err = admin.ParseClients(opts.Clients); err != nil {
		t.Fatal(err)
	}
	asCaller := opts.AdminWrite && opts.Clients == ""
	if asCaller {
		aopts.Clients, _ = admin.ParseClients(TestCaller)
	}
	svc, err := admin.New(aopts)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Service != nil {
		*opts.Service = svc
	}
	h := server.NewHandler(server.Options{
		Engine: eng, Logger: log, Metrics: metrics, Reflection: true,
		ReflectionNames: []string{admin.ServiceName},
		Mount:           []func(*http.ServeMux, connect.HandlerOption){svc.Mount},
	})
	if asCaller {
		h = AsVerifiedCaller(h, TestCaller)
	}
	s := &Server{Engine: eng, Fake: fb, Registry: metrics.Registry, Logs: logs}
	hs := httptest.NewUnstartedServer(h)
	hs.Config.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	if opts.TLS {
		hs.EnableHTTP2 = true
		hs.StartTLS()
		pool := x509.NewCertPool()
		pool.AddCert(hs.Certificate())
		s.TLSConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}}
	} else {
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		hs.Config.Protocols = p
		hs.Start()
	}
	s.URL = hs.URL
	s.Addr = hs.Listener.Addr().(*net.TCPAddr).String()
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		eng.Close()
	})
	return s
}

// AsVerifiedCaller hands h every request as if its TLS stack had verified
// a client certificate whose only name is the CN name: it stands where
// mTLS would, for clients that cannot present a certificate. It exists
// only here, in front of the handler a test builds; the admin service has
// no setting that names a caller, so a production server has no such
// path.
func AsVerifiedCaller(h http.Handler, name string) http.Handler {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: name}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var st tls.ConnectionState
		if r.TLS != nil {
			st = *r.TLS
		}
		st.PeerCertificates = []*x509.Certificate{cert}
		st.VerifiedChains = [][]*x509.Certificate{{cert}}
		r = r.WithContext(r.Context()) // a shallow copy, not the caller's request
		r.TLS = &st
		h.ServeHTTP(w, r)
	})
}

// HTTPClient speaks HTTP/2 to the server: h2c with prior knowledge, or TLS
// with h2 negotiated (gRPC needs HTTP/2; Connect and gRPC-Web do not, but
// this is what a real client uses).
func (s *Server) HTTPClient() *http.Client {
	tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: s.TLSConfig}
	p := new(http.Protocols)
	if s.TLSConfig != nil {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	tr.Protocols = p
	return &http.Client{Transport: tr}
}
