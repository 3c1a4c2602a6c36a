// Package testpki makes the throwaway PKI that end-to-end suites (the
// real-libvirt integration tests and the chaos soak) serve a provider with:
// admin writes need a caller known by a verified client certificate
// (--admin-write with --admin-clients over mTLS). Test support only.
package testpki

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
	"path/filepath"
	"time"
)

// AdminMTLS writes a CA (ca.pem) and a server key pair for 127.0.0.1
// (server.pem, server-key.pem) into dir and issues a client certificate
// named client. It returns the provider flags that serve mTLS with them and
// allow admin writes to client, and the client's TLS configuration.
func AdminMTLS(dir, client string) ([]string, *tls.Config, error) {
	caKey, caCert, err := Issue(nil, nil, &x509.Certificate{Subject: pkix.Name{CommonName: client + "-ca"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign})
	if err != nil {
		return nil, nil, err
	}
	srvKey, srvCert, err := Issue(caKey, caCert, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature})
	if err != nil {
		return nil, nil, err
	}
	cliKey, cliCert, err := Issue(caKey, caCert, &x509.Certificate{Subject: pkix.Name{CommonName: client},
		DNSNames: []string{client}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
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
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{cliCert.Raw}, PrivateKey: cliKey, Leaf: cliCert}}}
	// --caller-identity=any: these suites drive lifecycle calls of many
	// shards (and none) and admin writes through one client certificate;
	// binding each call to a bigfleet:// identity has its own tests
	// (cmd/libvirt's TestCallerIdentityOverTheWire).
	flags := []string{"--tls-cert=" + filepath.Join(dir, "server.pem"), "--tls-key=" + filepath.Join(dir, "server-key.pem"),
		"--tls-ca=" + filepath.Join(dir, "ca.pem"), "--admin-write", "--admin-clients=" + client, "--caller-identity=any"}
	return flags, cfg, nil
}

// Issue makes a P-256 key and a certificate for tmpl, signed by the parent
// (self-signed when parent is nil), valid from an hour ago for a day.
func Issue(parentKey *ecdsa.PrivateKey, parent, tmpl *x509.Certificate) (*ecdsa.PrivateKey, *x509.Certificate, error) {
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
