package server

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
)

// TestTLSHandshakeRefusals: clients that fail the transport policy never
// reach a handler — hits counts every request the HTTP layer dispatched.
func TestTLSHandshakeRefusals(t *testing.T) {
	t.Parallel()
	tlsSrv := startServer(t, modeTLS)
	mtlsSrv := startServer(t, modeMTLS)
	tls12 := tlsSrv.pki.clientTLS(false)
	tls12.MaxVersion = tls.VersionTLS12
	untrusted := mtlsSrv.pki.clientTLS(false)
	untrusted.Certificates = []tls.Certificate{mtlsSrv.pki.untrusted}
	mtls12 := mtlsSrv.pki.clientTLS(true)
	mtls12.MaxVersion = tls.VersionTLS12

	cases := []struct {
		name string
		ts   *testServer
		cfg  *tls.Config
	}{
		{"tls1.2 client to tls", tlsSrv, tls12},
		{"tls1.2 client with cert to mtls", mtlsSrv, mtls12},
		{"no client cert to mtls", mtlsSrv, mtlsSrv.pki.clientTLS(false)},
		{"untrusted client cert to mtls", mtlsSrv, untrusted},
		{"plaintext h2c to tls", tlsSrv, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Not parallel: hits is shared per server and checked around each call.
			before := tc.ts.hits.Load()
			hc := httpClientFor(tc.ts, tc.cfg)
			defer hc.CloseIdleConnections()
			url := strings.Replace(tc.ts.url, "https://", map[bool]string{true: "http://", false: "https://"}[tc.cfg == nil], 1)
			client := bigfleetv1alpha1connect.NewCapacityProviderClient(hc, url, connect.WithGRPC())
			_, err := client.Get(t.Context(), connect.NewRequest(&pb.MachineRef{Id: "m-spec"}))
			if err == nil {
				t.Fatal("request succeeded; want a transport refusal")
			}
			_, err = grpcClient{dialGRPC(t, tc.ts, tc.cfg)}.call(t.Context(),
				bigfleetv1alpha1connect.CapacityProviderGetProcedure, &pb.MachineRef{Id: "m-spec"}, &pb.Machine{})
			if got := codeOfErr(err); got != connect.CodeUnavailable {
				t.Errorf("grpc-go: code %v (%v), want unavailable", got, err)
			}
			if n := tc.ts.hits.Load() - before; n != 0 {
				t.Errorf("%d requests reached the handler", n)
			}
		})
	}
	// The same servers do serve a well-behaved client.
	if _, err := (grpcClient{dialGRPC(t, mtlsSrv, mtlsSrv.pki.clientTLS(true))}).call(t.Context(),
		bigfleetv1alpha1connect.CapacityProviderGetProcedure, &pb.MachineRef{Id: "m-spec"}, &pb.Machine{}); err != nil {
		t.Fatalf("good mTLS client refused: %v", err)
	}
}

// TestTLSHTTP1 checks ALPN offers http/1.1 alongside h2 for curl-ish tools.
func TestTLSHTTP1(t *testing.T) {
	t.Parallel()
	ts := startServer(t, modeTLS)
	tr := &http.Transport{TLSClientConfig: ts.pki.clientTLS(false)}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Post(ts.url+bigfleetv1alpha1connect.CapacityProviderGetProcedure,
		"application/json", strings.NewReader(`{"id":"m-spec"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.ProtoMajor != 1 || res.TLS.Version != tls.VersionTLS13 {
		t.Errorf("status %d proto %s tls %x", res.StatusCode, res.Proto, res.TLS.Version)
	}
}

// TestTLSFilesRefusals: every bad flag combination fails before listening,
// and the message names the flag to fix.
func TestTLSFilesRefusals(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	empty := filepath.Join(dir, "empty.pem")
	_ = os.WriteFile(garbage, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"), 0o600)
	_ = os.WriteFile(empty, nil, 0o600)
	// A bundle with a key among its certificates: refused, not skipped.
	caPEM, _ := os.ReadFile(p.caFile)
	keyPEM, _ := os.ReadFile(p.clientKeyFile)
	withKey := filepath.Join(dir, "with-key.pem")
	_ = os.WriteFile(withKey, append(append(caPEM, keyPEM...), caPEM...), 0o600)
	cases := []struct {
		name  string
		files TLSFiles
		want  []string
	}{
		{"cert without key", TLSFiles{Cert: p.serverCert}, []string{"--tls-cert requires --tls-key"}},
		{"key without cert", TLSFiles{Key: p.serverKey}, []string{"--tls-key requires --tls-cert"}},
		{"ca alone", TLSFiles{CA: p.caFile}, []string{"--tls-ca requires --tls-cert and --tls-key"}},
		{"ca with cert only", TLSFiles{Cert: p.serverCert, CA: p.caFile}, []string{"--tls-ca requires"}},
		{"mismatched pair", TLSFiles{Cert: p.serverCert, Key: p.clientKeyFile}, []string{"--tls-cert", "--tls-key", p.serverCert}},
		{"missing cert file", TLSFiles{Cert: filepath.Join(dir, "nope.pem"), Key: p.serverKey}, []string{"--tls-cert", "nope.pem"}},
		{"garbage ca", TLSFiles{Cert: p.serverCert, Key: p.serverKey, CA: garbage}, []string{"--tls-ca", "garbage.pem"}},
		{"empty ca", TLSFiles{Cert: p.serverCert, Key: p.serverKey, CA: empty}, []string{"--tls-ca", "empty.pem"}},
		{"missing ca", TLSFiles{Cert: p.serverCert, Key: p.serverKey, CA: filepath.Join(dir, "ca-nope.pem")}, []string{"--tls-ca", "ca-nope.pem"}},
		{"key block in ca", TLSFiles{Cert: p.serverCert, Key: p.serverKey, CA: withKey}, []string{"--tls-ca", "with-key.pem", "not a CERTIFICATE"}},
		{"admin ca named", TLSFiles{Cert: p.serverCert, Key: p.serverKey, CA: empty, CAFlag: "--admin-tls-ca"}, []string{"--admin-tls-ca", "empty.pem"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, err := tc.files.Load()
			if err == nil || st != nil {
				t.Fatalf("Load(%+v) = %v, %v; want refusal", tc.files, st, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	for files, want := range map[TLSFiles]Security{
		{}:                                     SecurityInsecure,
		{Cert: p.serverCert, Key: p.serverKey}: SecurityTLS,
		{Cert: p.serverCert, Key: p.serverKey, CA: p.caFile}: SecurityMTLS,
	} {
		st, err := files.Load()
		if err != nil || st.Security != want || (st.Config != nil && st.Config.MinVersion != tls.VersionTLS13) ||
			(want == SecurityMTLS) != (st.Config != nil && st.Config.ClientAuth == tls.RequireAndVerifyClientCert) {
			t.Errorf("Load(%+v) = %+v, %v; want %q", files, st, err, want)
		}
	}
}

// TestTLSReloadOverTheWire: rotating the files behind a serving listener
// (as the kubelet does with a Secret) reaches the next connection, through
// the same builder serve uses.
func TestTLSReloadOverTheWire(t *testing.T) {
	t.Parallel()
	ts := startServer(t, modeMTLS)
	peerCN := func() string {
		t.Helper()
		conn, err := tls.Dial("tcp", ts.addr, ts.pki.clientTLS(true))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := peerCN(); cn != "server" {
		t.Fatalf("before rotation the server is %q", cn)
	}
	der, key := makeLeaf(t, ts.pki.ca, ts.pki.caKey, "server-rotated", x509.ExtKeyUsageServerAuth)
	dir := filepath.Dir(ts.pki.serverCert)
	writePEM(t, dir, filepath.Base(ts.pki.serverCert), "CERTIFICATE", der)
	writePEM(t, dir, filepath.Base(ts.pki.serverKey), "PRIVATE KEY", marshalKey(t, key))
	if changed, err := ts.tls.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v", changed, err)
	}
	if cn := peerCN(); cn != "server-rotated" {
		t.Errorf("after rotation a new connection sees %q, want server-rotated", cn)
	}
	// A broken rotation keeps the last good certificate on the wire.
	_ = os.WriteFile(ts.pki.serverKey, []byte("junk"), 0o600)
	if _, err := ts.tls.Reload(); err == nil || !strings.Contains(err.Error(), "--tls-key") {
		t.Errorf("broken key: Reload error %v, want one naming --tls-key", err)
	}
	if cn := peerCN(); cn != "server-rotated" {
		t.Errorf("after a broken rotation a new connection sees %q", cn)
	}
}
