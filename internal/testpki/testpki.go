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
	ca, err := Serve(dir, client+"-ca")
	if err != nil {
		return nil, nil, err
	}
	cfg, err := ca.Client(&x509.Certificate{Subject: pkix.Name{CommonName: client}, DNSNames: []string{client}})
	if err != nil {
		return nil, nil, err
	}
	// --caller-identity=any: these suites drive lifecycle calls of many
	// shards (and none) and admin writes through one client certificate;
	// binding each call to a bigfleet:// identity has its own tests
	// (cmd/libvirt's TestCallerIdentityOverTheWire).
	flags := append(ServerFlags(dir), "--admin-write", "--admin-clients="+client, "--caller-identity=any")
	return flags, cfg, nil
}

// CA is a throwaway certificate authority whose server certificate a
// provider serves with (Serve); Client issues its callers' certificates.
type CA struct {
	key   *ecdsa.PrivateKey
	cert  *x509.Certificate
	roots *x509.CertPool
}

// Serve makes a CA named name and writes it (ca.pem) and a server key pair
// for 127.0.0.1 it signed (server.pem, server-key.pem) into dir.
func Serve(dir, name string) (*CA, error) {
	caKey, caCert, err := Issue(nil, nil, &x509.Certificate{Subject: pkix.Name{CommonName: name},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign})
	if err != nil {
		return nil, err
	}
	srvKey, srvCert, err := Issue(caKey, caCert, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature})
	if err != nil {
		return nil, err
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return nil, err
	}
	for name, block := range map[string]*pem.Block{
		"ca.pem":         {Type: "CERTIFICATE", Bytes: caCert.Raw},
		"server.pem":     {Type: "CERTIFICATE", Bytes: srvCert.Raw},
		"server-key.pem": {Type: "EC PRIVATE KEY", Bytes: srvKeyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, err
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	return &CA{key: caKey, cert: caCert, roots: roots}, nil
}

// Client issues a client certificate for tmpl (its subject and SANs) and
// returns the TLS configuration that presents it to the server of Serve.
func (ca *CA) Client(tmpl *x509.Certificate) (*tls.Config, error) {
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	key, cert, err := Issue(ca.key, ca.cert, tmpl)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: ca.roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}}}, nil
}

// ServerFlags are the provider flags that serve mTLS with what Serve
// wrote into dir.
func ServerFlags(dir string) []string {
	return []string{"--tls-cert=" + filepath.Join(dir, "server.pem"), "--tls-key=" + filepath.Join(dir, "server-key.pem"),
		"--tls-ca=" + filepath.Join(dir, "ca.pem")}
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
