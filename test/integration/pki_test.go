//go:build integration

package integration

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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Admin writes (Release) need a caller known by a verified client
// certificate (--admin-write with --admin-clients over mTLS), so the
// providers the suite starts serve mTLS with a throwaway CA, and the suite
// dials them as the client adminClient.
const adminClient = "it-admin"

type testPKI struct {
	dir   string // ca.pem, server.pem/-key.pem
	creds credentials.TransportCredentials
}

var (
	pkiOnce sync.Once
	pki     testPKI
	pkiErr  error
)

// adminWriteFlags returns the provider flags that allow admin writes, and
// the credentials to dial it with: mTLS with writes allowed to adminClient
// where the binary knows --admin-clients, else plain --admin-write (the
// binaries from before admin writes needed a verified caller).
func adminWriteFlags(t *testing.T, bin string) ([]string, credentials.TransportCredentials) {
	t.Helper()
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	if !strings.Contains(string(help), "-admin-clients") {
		return []string{"--admin-write"}, insecure.NewCredentials()
	}
	pkiOnce.Do(func() { pki, pkiErr = newPKI() })
	if pkiErr != nil {
		t.Fatal(pkiErr)
	}
	return []string{"--tls-cert=" + filepath.Join(pki.dir, "server.pem"), "--tls-key=" + filepath.Join(pki.dir, "server-key.pem"),
		"--tls-ca=" + filepath.Join(pki.dir, "ca.pem"), "--admin-write", "--admin-clients=" + adminClient}, pki.creds
}

func newPKI() (testPKI, error) {
	dir, err := os.MkdirTemp("", "bigfleet-it-pki-")
	if err != nil {
		return testPKI{}, err
	}
	caKey, caCert, err := issue(nil, nil, &x509.Certificate{Subject: pkix.Name{CommonName: "bigfleet-it-ca"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign})
	if err != nil {
		return testPKI{}, err
	}
	srvKey, srvCert, err := issue(caKey, caCert, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature})
	if err != nil {
		return testPKI{}, err
	}
	cliKey, cliCert, err := issue(caKey, caCert, &x509.Certificate{Subject: pkix.Name{CommonName: adminClient},
		DNSNames: []string{adminClient}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage: x509.KeyUsageDigitalSignature})
	if err != nil {
		return testPKI{}, err
	}
	for name, block := range map[string]*pem.Block{
		"ca.pem":         {Type: "CERTIFICATE", Bytes: caCert.Raw},
		"server.pem":     {Type: "CERTIFICATE", Bytes: srvCert.Raw},
		"server-key.pem": keyBlock(srvKey),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return testPKI{}, err
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	creds := credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{cliCert.Raw}, PrivateKey: cliKey, Leaf: cliCert}}})
	return testPKI{dir: dir, creds: creds}, nil
}

// issue makes a P-256 key and a certificate for tmpl, signed by the parent
// (self-signed when parent is nil).
func issue(parentKey *ecdsa.PrivateKey, parent, tmpl *x509.Certificate) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, err
}

func keyBlock(k *ecdsa.PrivateKey) *pem.Block {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		panic(err) // a key we just generated always marshals
	}
	return &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
}
