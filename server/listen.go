package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server limits. Generous for BigFleet's small unary calls, tight enough
// that a slow or hostile client cannot pin resources.
const (
	readHeaderTimeout    = 10 * time.Second
	idleTimeout          = 2 * time.Minute
	maxHeaderBytes       = 64 << 10
	maxConcurrentStreams = 256
)

// Listener serves one handler on one address, in one security mode.
type Listener struct {
	srv      *http.Server
	ln       net.Listener
	security Security
}

// Listen binds addr now (so a port clash fails startup, not later) and
// prepares the server. With tlsCfg nil it speaks HTTP/1.1 and h2c (HTTP/2
// cleartext with prior knowledge, which is what grpc-go dials); otherwise
// TLS 1.3 with h2 and http/1.1 offered via ALPN.
func Listen(addr string, h http.Handler, tlsCfg *tls.Config, log *slog.Logger) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--addr %s: %w", addr, err)
	}
	return newListener(ln, h, tlsCfg, log), nil
}

func newListener(ln net.Listener, h http.Handler, tlsCfg *tls.Config, log *slog.Logger) *Listener {
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	security := SecurityInsecure
	if tlsCfg != nil {
		protos.SetHTTP2(true)
		security = SecurityTLS
		if tlsCfg.ClientAuth == tls.RequireAndVerifyClientCert {
			security = SecurityMTLS
		}
		ln = tls.NewListener(ln, tlsCfg)
	} else {
		protos.SetUnencryptedHTTP2(true)
	}
	srv := &http.Server{
		Handler:           presized{h}, // stack.go
		Protocols:         protos,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:      maxConcurrentStreams,
			MaxReceiveBufferPerStream: 1 << 20,
		},
		// Handshake failures (old TLS, missing or untrusted client certs)
		// are the client's problem; keep them out of the error stream.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return &Listener{srv: srv, ln: ln, security: security}
}

// Addr is the bound address (useful with port 0).
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Security is the mode this listener serves in.
func (l *Listener) Security() Security { return l.security }

// Serve blocks until Shutdown or Close; a clean stop returns nil.
func (l *Listener) Serve() error {
	if err := l.srv.Serve(l.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting, lets in-flight RPCs finish until ctx ends, then
// closes whatever is left (long-lived streams such as health Watch).
func (l *Listener) Shutdown(ctx context.Context) error {
	err := l.srv.Shutdown(ctx)
	if err != nil {
		_ = l.srv.Close()
	}
	return err
}
