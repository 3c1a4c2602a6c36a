package tlsreload

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultInterval is how often files are polled when Options.Interval is 0.
// The kubelet propagates a Secret update within about a minute, so a few
// seconds of extra delay costs nothing, and reading three small files is
// cheap.
const DefaultInterval = 5 * time.Second

// Options configure a Reloader. Cert and Key are required; CA turns on
// mutual TLS (RequireAndVerifyClientCert).
type Options struct {
	Cert, Key, CA string
	// CertName, KeyName and CAName are how errors and logs name the files:
	// the flags an operator sets (--tls-cert), so a refusal says what to
	// fix. Empty: "certificate", "key", "CA bundle".
	CertName, KeyName, CAName string

	// Interval between polls in Run; 0 means DefaultInterval.
	Interval time.Duration
	// NextProtos offered via ALPN; nil means h2 then http/1.1.
	NextProtos []string
	// Logger receives reload and rejection messages; nil discards them.
	Logger *slog.Logger
	// Now is the clock used to reject expired certificates; nil is time.Now.
	Now func() time.Time
}

// Status describes the material in use and the last rejected update.
type Status struct {
	MTLS       bool
	Generation uint64    // 1 after New, +1 per accepted change
	LoadedAt   time.Time // when the material in use was accepted
	NotAfter   time.Time // leaf certificate expiry of the material in use
	Subject    string    // leaf certificate subject of the material in use
	LastError  string    // why the last changed content was rejected ("" after a good load)
	LastErrAt  time.Time
}

// Reloader holds the current TLS material. All methods are safe for
// concurrent use.
type Reloader struct {
	opts Options
	log  *slog.Logger

	cur atomic.Pointer[material]

	mu      sync.Mutex // serialises Reload and guards the fields below
	badSum  [sha256.Size]byte
	lastErr string
	errAt   time.Time
}

// material is one immutable, validated generation.
type material struct {
	sum      [sha256.Size]byte
	cert     *tls.Certificate
	cfg      *tls.Config // handed to handshakes as is; never mutated
	gen      uint64
	loadedAt time.Time
}

// New loads and validates the files. An error means the process must not
// serve TLS with them (it names the file and the reason).
func New(opts Options) (*Reloader, error) {
	if opts.Cert == "" || opts.Key == "" {
		return nil, errors.New("tlsreload: certificate and key files are required")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.NextProtos == nil {
		opts.NextProtos = []string{"h2", "http/1.1"}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.CertName = cmp.Or(opts.CertName, "certificate")
	opts.KeyName = cmp.Or(opts.KeyName, "key")
	opts.CAName = cmp.Or(opts.CAName, "CA bundle")
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{opts: opts, log: log.With("component", "tlsreload")}
	raw, err := r.read()
	if err != nil {
		return nil, err
	}
	m, err := r.build(raw, 1)
	if err != nil {
		return nil, err
	}
	r.cur.Store(m)
	return r, nil
}

// Config returns the tls.Config to give the listener (tls.NewListener or
// http.Server.TLSConfig). It carries no certificate itself: each handshake
// asks GetConfigForClient for the current generation. ClientAuth mirrors the
// mode so code that inspects the config (to log "mtls") sees the truth.
func (r *Reloader) Config() *tls.Config {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS13,
		NextProtos:         append([]string(nil), r.opts.NextProtos...),
		GetCertificate:     r.GetCertificate,
		GetConfigForClient: r.GetConfigForClient,
	}
	if r.opts.CA != "" {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = r.cur.Load().cfg.ClientCAs
	}
	return cfg
}

// GetConfigForClient implements tls.Config.GetConfigForClient: the full
// config (certificate, client CAs, ALPN) of the current generation.
func (r *Reloader) GetConfigForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	return r.cur.Load().cfg, nil
}

// GetCertificate implements tls.Config.GetCertificate with the current
// certificate, for callers that build their own tls.Config.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cur.Load().cert, nil
}

// Run polls the files every Interval until ctx is done.
func (r *Reloader) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = r.Reload()
		}
	}
}

// Reload reads the files now (Run calls it; a SIGHUP handler may too). It
// reports whether new material was swapped in; an error means the files
// changed but were rejected, and the previous material stays in use.
// Unchanged content is a no-op, so calling it often is cheap.
func (r *Reloader) Reload() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cur.Load()
	raw, err := r.read()
	if err != nil {
		return false, r.reject(raw.sum(), err)
	}
	sum := raw.sum()
	if sum == old.sum {
		if r.lastErr != "" {
			r.log.Info("TLS files are back to the material in use", "generation", old.gen)
			r.lastErr, r.errAt, r.badSum = "", time.Time{}, [sha256.Size]byte{}
		}
		return false, nil
	}
	m, err := r.build(raw, old.gen+1)
	if err != nil {
		return false, r.reject(sum, err)
	}
	r.cur.Store(m)
	r.lastErr, r.errAt, r.badSum = "", time.Time{}, [sha256.Size]byte{}
	leaf := m.cert.Leaf
	r.log.Info("TLS material reloaded; new connections use it",
		"generation", m.gen, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC(),
		"mtls", r.opts.CA != "", "cert", r.opts.Cert, "key", r.opts.Key, "ca", r.opts.CA)
	return true, nil
}

// reject records and logs a refused update, once per distinct content so a
// broken Secret does not flood the log at every poll.
func (r *Reloader) reject(sum [sha256.Size]byte, err error) error {
	if sum != r.badSum || r.lastErr == "" {
		cur := r.cur.Load()
		r.log.Error("TLS material update rejected; still serving the last good certificate",
			"err", err, "serving_generation", cur.gen, "serving_not_after", cur.cert.Leaf.NotAfter.UTC(),
			"cert", r.opts.Cert, "key", r.opts.Key, "ca", r.opts.CA)
	}
	r.badSum, r.lastErr, r.errAt = sum, err.Error(), r.opts.Now()
	return err
}

// Status reports the material in use and the last rejection.
func (r *Reloader) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.cur.Load()
	return Status{
		MTLS:       r.opts.CA != "",
		Generation: m.gen,
		LoadedAt:   m.loadedAt,
		NotAfter:   m.cert.Leaf.NotAfter,
		Subject:    m.cert.Leaf.Subject.String(),
		LastError:  r.lastErr,
		LastErrAt:  r.errAt,
	}
}

// files is the raw content of one poll.
type files struct{ cert, key, ca []byte }

func (f files) sum() [sha256.Size]byte {
	h := sha256.New()
	for _, b := range [][]byte{f.cert, f.key, f.ca} {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var s [sha256.Size]byte
	copy(s[:], h.Sum(nil))
	return s
}

func (r *Reloader) read() (files, error) {
	var f files
	var err error
	if f.cert, err = os.ReadFile(r.opts.Cert); err != nil {
		return f, fmt.Errorf("%s: %w", r.opts.CertName, err)
	}
	if f.key, err = os.ReadFile(r.opts.Key); err != nil {
		return f, fmt.Errorf("%s: %w", r.opts.KeyName, err)
	}
	if r.opts.CA != "" {
		if f.ca, err = os.ReadFile(r.opts.CA); err != nil {
			return f, fmt.Errorf("%s: %w", r.opts.CAName, err)
		}
	}
	return f, nil
}

// build validates raw content into a generation: the pair must parse and
// match, the leaf must not be expired, the CA bundle must hold certificates
// and nothing else (parseCABundle).
func (r *Reloader) build(f files, gen uint64) (*material, error) {
	pair, err := tls.X509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("%s %s / %s %s: %w", r.opts.CertName, r.opts.Cert, r.opts.KeyName, r.opts.Key, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s %s: %w", r.opts.CertName, r.opts.Cert, err)
		}
	}
	now := r.opts.Now()
	if now.After(pair.Leaf.NotAfter) {
		return nil, fmt.Errorf("%s %s expired at %s", r.opts.CertName, r.opts.Cert, pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		NextProtos:   append([]string(nil), r.opts.NextProtos...),
	}
	if r.opts.CA != "" {
		pool, err := parseCABundle(f.ca)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", r.opts.CAName, r.opts.CA, err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		// A resumed TLS 1.3 session skips client-certificate verification;
		// without tickets a CA removed from the bundle takes effect on the
		// very next connection.
		cfg.SessionTicketsDisabled = true
	}
	return &material{sum: f.sum(), cert: &pair, cfg: cfg, gen: gen, loadedAt: now}, nil
}
