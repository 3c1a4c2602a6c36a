package server

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// fakeEngine is a scripted Engine: it serves a few canned machines and
// returns errs[id] (or panics for id "panic") so every wire path can be
// reached without the real engine's timing.
type fakeEngine struct {
	mu            sync.Mutex
	machines      map[string]record.Machine
	errs          map[string]error
	lastConfigure record.ConfigureRequest
	block         chan struct{} // when non-nil, Get("slow") waits on it
	entered       chan struct{}
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{
		machines: map[string]record.Machine{
			"m-spec": {ID: "m-spec", State: record.Speculative, InstanceType: "small", Zone: "z1",
				CapacityType: record.CapacityOnDemand, PricePerHour: 0.01,
				Resources: map[string]string{"cpu": "1"}, Allocatable: map[string]string{"cpu": "2", "memory": "4Gi"}},
			"m-idle": {ID: "m-idle", State: record.Idle, InstanceType: "small", Zone: "z1",
				CapacityType: record.CapacityOnDemand, Host: record.HostRef{Provider: "test", Ref: "z1/dom"}},
		},
		errs: map[string]error{},
	}
}

func (f *fakeEngine) check(id string) error {
	if id == "panic" {
		panic("scripted panic for " + id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.errs[id]; err != nil {
		return err
	}
	if _, ok := f.machines[id]; !ok {
		return &record.Error{Code: record.CodeNotFound, Msg: "machine " + id + " not found"}
	}
	return nil
}

func (f *fakeEngine) ack(id string, st record.State) (record.Ack, error) {
	if err := f.check(id); err != nil {
		return record.Ack{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.machines[id].Clone()
	m.State = st
	return record.Ack{OperationID: "op-" + id, Machine: m}, nil
}

func (f *fakeEngine) Create(_ context.Context, r record.CreateRequest) (record.Ack, error) {
	return f.ack(r.MachineID, record.Creating)
}

func (f *fakeEngine) Configure(_ context.Context, r record.ConfigureRequest) (record.Ack, error) {
	f.mu.Lock()
	f.lastConfigure = r
	f.mu.Unlock()
	a, err := f.ack(r.MachineID, record.Configuring)
	a.Machine.ShardMetadata = r.ShardMetadata
	a.Machine.Cluster = r.ClusterID
	return a, err
}

func (f *fakeEngine) Drain(_ context.Context, r record.DrainRequest) (record.Ack, error) {
	return f.ack(r.MachineID, record.Draining)
}

func (f *fakeEngine) Delete(_ context.Context, r record.DeleteRequest) (record.Ack, error) {
	return f.ack(r.MachineID, record.Deleting)
}

func (f *fakeEngine) Get(ctx context.Context, id string) (record.Machine, error) {
	if id == "slow" && f.block != nil {
		close(f.entered)
		select {
		case <-f.block:
			return record.Machine{ID: "slow", State: record.Idle}, nil
		case <-ctx.Done():
			return record.Machine{}, ctx.Err()
		}
	}
	if err := f.check(id); err != nil {
		return record.Machine{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.machines[id].Clone(), nil
}

func (f *fakeEngine) List(_ context.Context, q record.ListQuery) (record.ListResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out record.ListResult
	for _, id := range []string{"m-idle", "m-spec"} {
		out.Machines = append(out.Machines, f.machines[id].Clone())
	}
	out.Revision = append([]byte("rev:"), q.Since...)
	return out, nil
}

func (f *fakeEngine) GetShared(ctx context.Context, id string) (*record.Machine, error) {
	m, err := f.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return &m, nil
}

func (f *fakeEngine) ListShared(ctx context.Context, q record.ListQuery) (lifecycle.SharedList, error) {
	res, err := f.List(ctx, q)
	if err != nil {
		return lifecycle.SharedList{}, err
	}
	out := lifecycle.SharedList{Revision: res.Revision}
	for i := range res.Machines {
		out.Machines = append(out.Machines, &res.Machines[i])
	}
	return out, nil
}

// syncBuffer collects log output written from server goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testServer is one provider on a real 127.0.0.1 listener.
type testServer struct {
	addr    string      // host:port
	url     string      // scheme://host:port
	engine  *fakeEngine // nil when serving the real engine
	metrics *Metrics
	status  *Status
	logs    *syncBuffer
	hits    *atomic.Int64 // requests that reached the HTTP handler
	lis     *Listener
	pki     *testPKI
	tls     *ServerTLS // nil in h2c mode
}

type serverMode int

const (
	modeH2C serverMode = iota
	modeTLS
	modeMTLS
)

func (m serverMode) String() string { return [...]string{"h2c", "tls", "mtls"}[m] }

func startServer(t *testing.T, mode serverMode) *testServer {
	t.Helper()
	f := newFakeEngine()
	ts := startServerWith(t, mode, f)
	ts.engine = f
	return ts
}

// startServerWith serves eng (a fake or the real engine).
func startServerWith(t *testing.T, mode serverMode, eng Engine) *testServer {
	t.Helper()
	ts := &testServer{
		status:  NewStatus(),
		logs:    &syncBuffer{},
		hits:    new(atomic.Int64),
		metrics: nil,
	}
	ts.metrics = NewMetrics(func(emit func(record.State, string, int)) {
		emit(record.Idle, "z1", 1)
		emit(record.Speculative, "z1", 1)
	})
	log := slog.New(slog.NewJSONHandler(ts.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := NewHandler(Options{Engine: eng, Logger: log, Metrics: ts.metrics, Status: ts.status, Reflection: true})
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.hits.Add(1)
		h.ServeHTTP(w, r)
	})
	var cfg *tls.Config
	scheme := "http"
	if mode != modeH2C {
		ts.pki = newTestPKI(t)
		files := TLSFiles{Cert: ts.pki.serverCert, Key: ts.pki.serverKey}
		if mode == modeMTLS {
			files.CA = ts.pki.caFile
		}
		st, err := files.Load() // the builder serve uses
		if err != nil {
			t.Fatal(err)
		}
		cfg, ts.tls = st.Config, st
		scheme = "https"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.lis = newListener(ln, counted, cfg, log)
	ts.addr = ln.Addr().String()
	ts.url = scheme + "://" + ts.addr
	done := make(chan error, 1)
	go func() { done <- ts.lis.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ts.lis.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

// testPKI is a throwaway CA with a server cert for 127.0.0.1/localhost, a
// client cert it signed, and a client cert from an unrelated CA.
type testPKI struct {
	caPool                        *x509.CertPool
	caFile                        string
	serverCert, serverKey         string
	client, untrusted             tls.Certificate
	clientCertFile, clientKeyFile string
	ca                            *x509.Certificate // issues rotated certificates
	caKey                         *ecdsa.PrivateKey
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := makeCA(t, "test-ca")
	other, otherKey := makeCA(t, "other-ca")
	p := &testPKI{caPool: x509.NewCertPool(), ca: ca, caKey: caKey}
	p.caPool.AddCert(ca)
	p.caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	srvDER, srvKey := makeLeaf(t, ca, caKey, "server", x509.ExtKeyUsageServerAuth)
	p.serverCert = writePEM(t, dir, "server.pem", "CERTIFICATE", srvDER)
	p.serverKey = writePEM(t, dir, "server-key.pem", "PRIVATE KEY", marshalKey(t, srvKey))
	cliDER, cliKey := makeLeaf(t, ca, caKey, "client", x509.ExtKeyUsageClientAuth)
	p.client = tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}
	p.clientCertFile = writePEM(t, dir, "client.pem", "CERTIFICATE", cliDER)
	p.clientKeyFile = writePEM(t, dir, "client-key.pem", "PRIVATE KEY", marshalKey(t, cliKey))
	badDER, badKey := makeLeaf(t, other, otherKey, "intruder", x509.ExtKeyUsageClientAuth)
	p.untrusted = tls.Certificate{Certificate: [][]byte{badDER}, PrivateKey: badKey}
	return p
}

// clientTLS is a TLS 1.3 client config trusting the test CA.
func (p *testPKI) clientTLS(withCert bool) *tls.Config {
	c := &tls.Config{RootCAs: p.caPool, MinVersion: tls.VersionTLS12, ServerName: "localhost"}
	if withCert {
		c.Certificates = []tls.Certificate{p.client}
	}
	return c
}

var serial atomic.Int64

func makeCA(t *testing.T, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

func makeLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func marshalKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
