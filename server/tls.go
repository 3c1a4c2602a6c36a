package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Security is the transport mode, logged once at startup as "security".
type Security string

const (
	SecurityInsecure Security = "insecure"
	SecurityTLS      Security = "tls"
	SecurityMTLS     Security = "mtls"
)

// TLSFiles are the --tls-cert, --tls-key and --tls-ca paths. Error messages
// name those flags because they are what an operator has to fix.
type TLSFiles struct {
	Cert, Key, CA string
}

// Load validates the combination and builds the server TLS config; it runs
// before anything listens, so a half-configured TLS setup never serves
// plaintext by accident. A nil config means insecure (h2c + HTTP/1.1).
func (f TLSFiles) Load() (*tls.Config, Security, error) {
	switch {
	case f.Cert == "" && f.Key == "" && f.CA == "":
		return nil, SecurityInsecure, nil
	case f.CA != "" && (f.Cert == "" || f.Key == ""):
		return nil, "", errors.New("--tls-ca requires --tls-cert and --tls-key")
	case f.Cert != "" && f.Key == "":
		return nil, "", errors.New("--tls-cert requires --tls-key")
	case f.Key != "" && f.Cert == "":
		return nil, "", errors.New("--tls-key requires --tls-cert")
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, "", fmt.Errorf("--tls-cert/--tls-key: cannot load key pair (cert %s, key %s): %w", f.Cert, f.Key, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if f.CA == "" {
		return cfg, SecurityTLS, nil
	}
	pool, err := loadCAPool(f.CA)
	if err != nil {
		return nil, "", err
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	return cfg, SecurityMTLS, nil
}

// loadCAPool insists on at least one parseable certificate: an empty pool
// would reject every client, which looks like a network fault, not a typo.
func loadCAPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--tls-ca: %s contains no parseable PEM certificate", path)
	}
	return pool, nil
}
