//go:build soak

package soak

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
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// The soak releases FAILED machines through the admin API, whose writes
// need a caller known by a verified client certificate (--admin-write with
// --admin-clients over mTLS). So the provider serves mTLS with a throwaway
// CA, and the soak's clients present the certificate of adminClient, as
// shards would present theirs.
const adminClient = "soak-admin"

// adminWriteFlags returns the provider flags that allow admin writes, and
// the credentials to dial it with (plain --admin-write for binaries from
// before admin writes needed a verified caller).
func adminWriteFlags(bin, dir string) ([]string, credentials.TransportCredentials, error) {
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	if !strings.Contains(string(help), "-admin-clients") {
		return []string{"--admin-write"}, insecure.NewCredentials(), nil
	}
	caKey, caCert, err := issue(nil, nil, &x509.Certificate{Subject: pkix.Name{CommonName: "bigfleet-soak-ca"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign})
	if err != nil {
		return nil, nil, err
	}
	srvKey, srvCert, err := issue(caKey, caCert, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature})
	if err != nil {
		return nil, nil, err
	}
	cliKey, cliCert, err := issue(caKey, caCert, &x509.Certificate{Subject: pkix.Name{CommonName: adminClient},
		DNSNames: []string{adminClient}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage: x509.KeyUsageDigitalSignature})
	if err != nil {
		return nil, nil, err
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return nil, nil, err
	}
	for name, block := range map[string]*pem.Block{
		"ca.pem":         {Type: "CERTIFICATE", Bytes: caCert.Raw},
		"server.pem":     {Type: "CERTIFICATE", Bytes: srvCert.Raw},
		"server-key.pem": {Type: "EC PRIVATE KEY", Bytes: srvKeyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, nil, err
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	creds := credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{cliCert.Raw}, PrivateKey: cliKey, Leaf: cliCert}}})
	return []string{"--tls-cert=" + filepath.Join(dir, "server.pem"), "--tls-key=" + filepath.Join(dir, "server-key.pem"),
		"--tls-ca=" + filepath.Join(dir, "ca.pem"), "--admin-write", "--admin-clients=" + adminClient}, creds, nil
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
