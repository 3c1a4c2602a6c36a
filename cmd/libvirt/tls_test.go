package main

import (
	"crypto/tls"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// peerCN is the common name of the certificate a new connection to addr
// is served.
func peerCN(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if v := conn.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("negotiated TLS %x, want 1.3", v)
	}
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// replaceFile copies src over dst atomically, as a Secret update does.
func replaceFile(t *testing.T, dst, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
}

// TestServeMTLSAndReload runs the production wiring (run → serve →
// server.TLSFiles.Load → server.Listen) with mTLS: BigFleet's certificate
// is served, a client without one is refused at the handshake, and when
// the certificate files are rotated a new connection sees the new one
// without a restart.
func TestServeMTLSAndReload(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "bigfleet-ca")
	srv, bf := ca.issue(t, "server"), ca.issue(t, "bigfleet", "bigfleet.test", "bigfleet://shard/s1")
	p := startProvider(t, "--use-fake-backend", "--seed-count=2", "--metrics-addr=",
		"--tls-cert="+srv.certFile, "--tls-key="+srv.keyFile, "--tls-ca="+ca.file, "--tls-reload-interval=20ms")
	if s := p.logLines("serving"); len(s) != 1 || s[0]["security"] != "mtls" {
		t.Errorf("serving log = %v", s)
	}
	if n := len(dialTLS(t, p.addr, clientTLS(ca, &bf)).list(t).GetMachines()); n != 2 {
		t.Errorf("List over mTLS = %d machines", n)
	}
	err := dialTLS(t, p.addr, clientTLS(ca, nil)).conn.Invoke(t.Context(),
		"/bigfleet.v1alpha1.CapacityProvider/List", &pb.ListFilter{}, new(pb.MachineList))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("List without a client certificate: %v, want a handshake refusal (Unavailable)", err)
	}
	if cn := peerCN(t, p.addr, clientTLS(ca, &bf)); cn != "server" {
		t.Fatalf("served %q", cn)
	}

	rotated := ca.issue(t, "server-rotated")
	replaceFile(t, srv.keyFile, rotated.keyFile)
	replaceFile(t, srv.certFile, rotated.certFile)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if cn := peerCN(t, p.addr, clientTLS(ca, &bf)); cn == "server-rotated" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after rotation a new connection still sees %q\n%s", cn, p.stderr)
		}
	}
	if len(p.logLines("TLS material reloaded; new connections use it")) == 0 {
		t.Errorf("no reload log:\n%s", p.stderr)
	}
	if n := len(dialTLS(t, p.addr, clientTLS(ca, &bf)).list(t).GetMachines()); n != 2 {
		t.Errorf("List after rotation = %d machines", n)
	}
}

// TestServeRefusesJunkCA: a CA bundle with a key among its certificates,
// or with no certificate, stops the start and names the flag.
func TestServeRefusesJunkCA(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "ca")
	srv := ca.issue(t, "server")
	caPEM, _ := os.ReadFile(ca.file)
	keyPEM, _ := os.ReadFile(srv.keyFile)
	dir := t.TempDir()
	withKey, empty := dir+"/with-key.pem", dir+"/empty.pem"
	_ = os.WriteFile(withKey, append(caPEM, keyPEM...), 0o600)
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	tlsArgs := []string{"--use-fake-backend", "--addr=127.0.0.1:0", "--metrics-addr=", "--tls-cert=" + srv.certFile, "--tls-key=" + srv.keyFile}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-ca=" + withKey}, "--tls-ca " + withKey + ": PEM block 2"},
		{[]string{"--tls-ca=" + empty}, "--tls-ca " + empty + ": contains no PEM certificate"},
		{[]string{"--tls-ca=" + ca.file, "--admin-addr=127.0.0.1:0", "--admin-tls-ca=" + withKey}, "--admin-tls-ca " + withKey},
	} {
		err := run(t.Context(), append(tlsArgs, tc.args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%v) = %v; want an error containing %q", tc.args, err, tc.want)
		}
	}
}
