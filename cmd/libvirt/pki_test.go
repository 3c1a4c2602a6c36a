package main

import (
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
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testCA issues the certificates of the TLS and admin tests; its file is
// what --tls-ca / --admin-tls-ca point at.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

var certSerial atomic.Int64

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(certSerial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key}
	ca.file = writePEMFile(t, filepath.Join(t.TempDir(), cn+".pem"), "CERTIFICATE", der)
	return ca
}

// leaf is an issued certificate: in files (for the provider's flags) and
// in memory (for a client).
type leaf struct {
	certFile, keyFile string
	pair              tls.Certificate
}

// issue signs a server certificate for 127.0.0.1/localhost (sans nil), or
// a client certificate with the given SANs: URI SANs for names with "://"
// (bigfleet://shard/s1), DNS SANs for the others and for "dns:NAME" (a DNS
// SAN that looks like a URI).
func (ca *testCA) issue(t *testing.T, cn string, sans ...string) leaf {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(certSerial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, s := range sans {
		if dns, ok := strings.CutPrefix(s, "dns:"); ok {
			tmpl.DNSNames = append(tmpl.DNSNames, dns)
		} else if u, err := url.Parse(s); err == nil && strings.Contains(s, "://") {
			tmpl.URIs = append(tmpl.URIs, u)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	if sans == nil {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames, tmpl.IPAddresses = []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	dir := t.TempDir()
	return leaf{
		certFile: writePEMFile(t, filepath.Join(dir, "cert.pem"), "CERTIFICATE", der),
		keyFile:  writePEMFile(t, filepath.Join(dir, "key.pem"), "PRIVATE KEY", kder),
		pair:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
	}
}

// writePEMFile replaces path atomically (write, then rename), as the
// kubelet swaps a Secret volume, so a poll never reads half a file.
func writePEMFile(t *testing.T, path, typ string, der []byte) string {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// clientTLS trusts ca for the server and presents cert when given.
func clientTLS(ca *testCA, cert *leaf) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	c := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS13}
	if cert != nil {
		c.Certificates = []tls.Certificate{cert.pair}
	}
	return c
}

// dialTLS is a grpc-go client (BigFleet's stack) over TLS.
func dialTLS(t *testing.T, addr string, cfg *tls.Config) client {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return client{conn}
}
