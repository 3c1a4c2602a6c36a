package soakkit

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"

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
	ca, err := testpki.Serve(dir, "soak-ca")
	if err != nil {
		return nil, nil, err
	}
	cfgs := map[string]*tls.Config{}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			return nil, nil, err
		}
		cfg, err := ca.Client(&x509.Certificate{Subject: pkix.Name{CommonName: parsed.Host + parsed.Path}, URIs: []*url.URL{parsed}})
		if err != nil {
			return nil, nil, err
		}
		cfgs[u] = cfg
	}
	return append(testpki.ServerFlags(dir), "--admin-write"), cfgs, nil
}
