package soakkit

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/url"
	"os"
	"path/filepath"

	"github.com/bigfleet/libvirt-provider/internal/testpki"
)

// Callers writes a CA (ca.pem) and a server key pair for 127.0.0.1 into
// dir, and issues one client certificate per BigFleet identity in uris
// (each a single URI SAN such as bigfleet://shard/s1 or bigfleet://admin).
// It returns the provider flags that serve mTLS with them under the
// default --caller-identity=bigfleet and let bigfleet://admin write the
// admin API (--admin-write, the default --admin-clients), and each
// identity's TLS configuration, keyed by its URI.
func Callers(dir string, uris ...string) ([]string, map[string]*tls.Config, error) {
	caKey, caCert, err := testpki.Issue(nil, nil, &x509.Certificate{Subject: pkix.Name{CommonName: "soak-ca"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign})
	if err != nil {
		return nil, nil, err
	}
	srvKey, srvCert, err := testpki.Issue(caKey, caCert, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
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
	cfgs := map[string]*tls.Config{}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			return nil, nil, err
		}
		key, cert, err := testpki.Issue(caKey, caCert, &x509.Certificate{Subject: pkix.Name{CommonName: parsed.Host + parsed.Path},
			URIs: []*url.URL{parsed}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			KeyUsage: x509.KeyUsageDigitalSignature})
		if err != nil {
			return nil, nil, err
		}
		cfgs[u] = &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
			Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}}}
	}
	flags := []string{"--tls-cert=" + filepath.Join(dir, "server.pem"), "--tls-key=" + filepath.Join(dir, "server-key.pem"),
		"--tls-ca=" + filepath.Join(dir, "ca.pem"), "--admin-write"}
	return flags, cfgs, nil
}
