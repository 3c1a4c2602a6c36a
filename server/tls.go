package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"time"

	"github.com/bigfleet/libvirt-provider/server/tlsreload"
)

// Security is the transport mode, logged once at startup as "security".
type Security string

const (
	SecurityInsecure Security = "insecure"
	SecurityTLS      Security = "tls"
	SecurityMTLS     Security = "mtls"
)

// TLSFiles are the certificate, key and client CA paths of one listener,
// with the flags that set them: errors name those flags because they are
// what an operator has to fix.
type TLSFiles struct {
	Cert, Key, CA string
	// CAFlag names the CA's flag; empty is --tls-ca. The admin listener
	// passes --admin-tls-ca.
	CAFlag string
	// Interval between polls of the files; 0 is tlsreload.DefaultInterval.
	Interval time.Duration
	Logger   *slog.Logger // nil: discard
}

// ServerTLS is a listener's transport. Config is nil in insecure mode;
// otherwise every handshake takes the current generation of the files
// from the reloader, so a rotated certificate reaches new connections
// without a restart.
type ServerTLS struct {
	Config   *tls.Config
	Security Security
	reloader *tlsreload.Reloader
}

// Run follows changes to the files until ctx ends (a no-op when insecure).
func (s *ServerTLS) Run(ctx context.Context) {
	if s.reloader != nil {
		s.reloader.Run(ctx)
	}
}

// Reload re-reads the files now (tests; Run does it on a timer).
func (s *ServerTLS) Reload() (bool, error) {
	if s.reloader == nil {
		return false, nil
	}
	return s.reloader.Reload()
}

// Load is the one TLS builder: production and every TLS test get their
// listener's config here. It validates the flag combination and the files
// before anything listens, so a half-configured TLS setup never serves
// plaintext by accident: TLS 1.3 minimum, h2 and http/1.1 via ALPN, and
// with a CA, RequireAndVerifyClientCert against a bundle that holds
// certificates and nothing else.
func (f TLSFiles) Load() (*ServerTLS, error) {
	caFlag := f.CAFlag
	if caFlag == "" {
		caFlag = "--tls-ca"
	}
	switch {
	case f.Cert == "" && f.Key == "" && f.CA == "":
		return &ServerTLS{Security: SecurityInsecure}, nil
	case f.CA != "" && (f.Cert == "" || f.Key == ""):
		return nil, errors.New(caFlag + " requires --tls-cert and --tls-key")
	case f.Cert != "" && f.Key == "":
		return nil, errors.New("--tls-cert requires --tls-key")
	case f.Key != "" && f.Cert == "":
		return nil, errors.New("--tls-key requires --tls-cert")
	}
	log := f.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rl, err := tlsreload.New(tlsreload.Options{Cert: f.Cert, Key: f.Key, CA: f.CA,
		CertName: "--tls-cert", KeyName: "--tls-key", CAName: caFlag,
		Interval: f.Interval, Logger: log})
	if err != nil {
		return nil, err
	}
	s := &ServerTLS{Config: rl.Config(), Security: SecurityTLS, reloader: rl}
	if f.CA != "" {
		s.Security = SecurityMTLS
	}
	return s, nil
}
