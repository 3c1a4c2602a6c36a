//go:build ha

package ha

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

const adminMethod = "/libvirtprovider.admin.v1.AdminService/"

// hostsDoc is three fake hosts in two zones (--hosts).
const hostsDoc = `hosts:
  - name: kvm-a1
    zone: zone-a
    uri: test:///default
    fake: {vcpus: 16, memory_mib: 65536, pool_gib: 500}
  - name: kvm-a2
    zone: zone-a
    uri: test:///default
  - name: kvm-b1
    zone: zone-b
    uri: test:///default
`

// pki is a throwaway CA with a server certificate for 127.0.0.1 and one
// client certificate, bigfleet://admin: under --caller-identity=any it may
// make every call, and (the default --admin-clients) write the admin API.
type pki struct {
	caFile, certFile, keyFile string
	client                    *tls.Config
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ha-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(2 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, tmpl *x509.Certificate) (certDER, keyDER []byte, key *ecdsa.PrivateKey) {
		key, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(serial), time.Now().Add(-time.Hour), time.Now().Add(2*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalPKCS8PrivateKey(key)
		return der, kder, key
	}
	srvDER, srvKey, _ := issue(2, &x509.Certificate{Subject: pkix.Name{CommonName: "provider"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}})
	admin, _ := url.Parse("bigfleet://admin")
	cliDER, _, cliKey := issue(3, &x509.Certificate{Subject: pkix.Name{CommonName: "admin"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, URIs: []*url.URL{admin}})
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	return &pki{caFile: write("ca.pem", "CERTIFICATE", caDER),
		certFile: write("srv.pem", "CERTIFICATE", srvDER), keyFile: write("srv.key", "PRIVATE KEY", srvKey),
		client: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13,
			Certificates: []tls.Certificate{{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}}}}
}

// newAdminProvider is a candidate on three fake hosts under mTLS with the
// admin API writable by bigfleet://admin.
func newAdminProvider(t *testing.T, k *kube, name, lease string, tm timing, ca *pki, hosts string) *provider {
	p := newProviderOn(t, k, name, lease, tm, "--use-fake-backend", "--hosts="+hosts, "--seed-count=2",
		"--state="+filepath.Join(t.TempDir(), "state.db"),
		"--tls-cert="+ca.certFile, "--tls-key="+ca.keyFile, "--tls-ca="+ca.caFile,
		"--caller-identity=any", "--admin-write")
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(credentials.NewTLS(ca.client)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p.conn = conn
	return p
}

func (p *provider) adminCall(t *testing.T, rpc string, req, res any) error {
	t.Helper()
	ctx, cancel := context5s(t)
	defer cancel()
	return p.conn.Invoke(ctx, adminMethod+rpc, req, res)
}

func (p *provider) hosts(t *testing.T) map[string]*adminv1.Host {
	t.Helper()
	var res adminv1.ListHostsResponse
	if err := p.adminCall(t, "ListHosts", &adminv1.ListHostsRequest{}, &res); err != nil {
		t.Fatalf("%s ListHosts: %v", p.name, err)
	}
	out := map[string]*adminv1.Host{}
	for _, h := range res.GetHosts() {
		out[h.GetName()] = h
	}
	return out
}

// TestHostRecordsAcrossFailover: an admin cordon and a host-down
// declaration made on the leader hold on the replica that takes over
// after a SIGKILL (through the shared journal; before it, they were kept
// beside the per-pod state file and lost), with who made them and why.
// A standby refuses such a write: only the leader changes them.
func TestHostRecordsAcrossFailover(t *testing.T) {
	k := startKube(t)
	ca := newPKI(t)
	hosts := filepath.Join(t.TempDir(), "hosts.yaml")
	if err := os.WriteFile(hosts, []byte(hostsDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newAdminProvider(t, k, "pod-a", "hostrecords", short, ca, hosts)
	b := newAdminProvider(t, k, "pod-b", "hostrecords", short, ca, hosts)
	a.start(t)
	b.start(t)
	leader, _ := waitLeader(t, short.lease+short.bound(), a, b)
	standby := other(leader, a, b)

	err := standby.adminCall(t, "CordonHost", &adminv1.CordonHostRequest{Host: "kvm-a2", Reason: "on the standby"}, new(adminv1.CordonHostResponse))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("CordonHost on the standby: %v, want Unavailable", err)
	}
	if err := leader.adminCall(t, "CordonHost", &adminv1.CordonHostRequest{Host: "kvm-a1", Reason: "firmware upgrade"}, new(adminv1.CordonHostResponse)); err != nil {
		t.Fatalf("CordonHost on the leader: %v", err)
	}
	if err := leader.adminCall(t, "DeclareHostDown", &adminv1.DeclareHostDownRequest{Host: "kvm-b1", Reason: "powered off via IPMI"}, new(adminv1.DeclareHostDownResponse)); err != nil {
		t.Fatalf("DeclareHostDown on the leader: %v", err)
	}
	leader.kill()
	if got, _ := waitLeader(t, 2*short.bound(), standby); got != standby {
		t.Fatal("the standby did not take over")
	}
	logTakeover(t, standby)
	hs := standby.hosts(t)
	if h := hs["kvm-a1"]; !h.GetCordoned() || h.GetCordon().GetBy() != "bigfleet://admin" || h.GetCordon().GetReason() != "firmware upgrade" {
		t.Errorf("kvm-a1 on the new leader: cordoned %v %v, want the old leader's cordon", h.GetCordoned(), h.GetCordon())
	}
	if h := hs["kvm-b1"]; h.GetState() != "down" || h.GetDown().GetReason() != "powered off via IPMI" {
		t.Errorf("kvm-b1 on the new leader: %q %v, want down as declared", h.GetState(), h.GetDown())
	}
	if h := hs["kvm-a2"]; h.GetCordoned() {
		t.Errorf("kvm-a2, whose cordon the standby refused, is cordoned: %v", h.GetCordon())
	}
	// The new leader's own changes are shared in turn.
	if err := standby.adminCall(t, "UncordonHost", &adminv1.UncordonHostRequest{Host: "kvm-a1"}, new(adminv1.UncordonHostResponse)); err != nil {
		t.Errorf("UncordonHost on the new leader: %v", err)
	}
}

func context5s(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), 5*time.Second)
}
