package callerid

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Mode is --caller-identity.
type Mode string

const (
	// ModeBigFleet binds each call to the caller's certificate (the
	// default under mTLS).
	ModeBigFleet Mode = "bigfleet"
	// ModeAny lets any certificate the CA signed make any call: for a mesh
	// that terminates TLS before the provider, or a migration period while
	// shards get their URI SANs.
	ModeAny Mode = "any"
)

// Options configures a Guard.
type Options struct {
	Logger     *slog.Logger          // nil: discard
	Registerer prometheus.Registerer // nil: the counter is not exported
	// RequestID returns the call's request id for the WARN line (nil: none).
	RequestID func(context.Context) string
	Now       func() time.Time // nil: time.Now
}

// Guard enforces ModeBigFleet on the CapacityProvider service: Middleware
// hands the verified client certificate to Interceptor, which decides.
type Guard struct {
	log       *slog.Logger
	rejected  *prometheus.CounterVec
	requestID func(context.Context) string
	now       func() time.Time
	recent    *ring
}

// New builds a guard and registers identity_rejected_total.
func New(opts Options) (*Guard, error) {
	g := &Guard{log: opts.Logger, requestID: opts.RequestID, now: opts.Now, recent: newRing(RecentLimit)}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.requestID == nil {
		g.requestID = func(context.Context) string { return "" }
	}
	g.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "identity_rejected_total",
		Help: "CapacityProvider and admin-read calls refused with PermissionDenied because the caller's client certificate does not allow them (BigFleet ADR-0048, ADR-0060), by method and reason.",
	}, []string{"method", "reason"})
	for _, m := range append(append([]string(nil), methods...), AdminReads...) {
		for _, r := range Reasons {
			g.rejected.WithLabelValues(m, string(r))
		}
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(g.rejected); err != nil {
			return nil, err
		}
	}
	return g, nil
}

var methods = []string{"Create", "Configure", "Drain", "Delete", "Get", "List"}

// AdminReads are the admin service's read methods, for the metric's
// method label (AdminInterceptor checks every method that is not a write,
// listed here or not; an unlisted one is counted as "other").
var AdminReads = []string{"GetFleetSummary", "ListHosts", "ListMachines", "GetMachine",
	"GetMachineHistory", "ListFenceMarks", "WatchMachines", "ListIdentityRefusals", "WhoAmI"}

// reads are the methods any BigFleet identity may call; every other
// method (the four mutations, and any method added later until it is
// listed here) needs the shard of its token.
var reads = map[string]bool{"Get": true, "List": true}

type certKey struct{}

// Middleware records the verified client certificate for Interceptor.
func (g *Guard) Middleware(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if leaf := VerifiedLeaf(r); leaf != nil {
			r = r.WithContext(context.WithValue(r.Context(), certKey{}, leaf))
		}
		h.ServeHTTP(w, r)
	})
}

// VerifiedLeaf is the client certificate the TLS stack verified against
// the listener's CA, or nil: a certificate it did not verify is no
// identity at all.
func VerifiedLeaf(r *http.Request) *x509.Certificate {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		return r.TLS.VerifiedChains[0][0]
	}
	return nil
}

// shardToken is what every mutation's request has.
type shardToken interface{ GetShardId() string }

// Interceptor refuses the calls the caller's certificate does not allow
// with PermissionDenied, before the handler runs.
func (g *Guard) Interceptor() connect.Interceptor { return interceptor{g} }

type interceptor struct{ g *Guard }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		shard := ""
		if t, ok := req.Any().(shardToken); ok {
			shard = t.GetShardId()
		}
		if err := i.g.check(ctx, req.Spec().Procedure, shard, req.Peer()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler holds a streaming method (the service has none
// today) to the mutation rule with no shard: refused, never let through.
func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := i.g.check(ctx, conn.Spec().Procedure, "", conn.Peer()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

func (g *Guard) check(ctx context.Context, procedure, shard string, peer connect.Peer) error {
	method := shortName(procedure)
	cert, id := certOf(ctx)
	return g.verdict(ctx, method, Decide(method, !reads[method], shard, cert != nil, id), peer)
}

func shortName(procedure string) string { return procedure[strings.LastIndexByte(procedure, '/')+1:] }

// certOf is the call's verified certificate (nil: none) and its identity.
func certOf(ctx context.Context) (*x509.Certificate, Identity) {
	cert, ok := ctx.Value(certKey{}).(*x509.Certificate)
	if !ok {
		return nil, Identity{}
	}
	return cert, Of(cert)
}

// verdict logs, counts and keeps a refusal and returns its error; nil r
// lets the call through.
func (g *Guard) verdict(ctx context.Context, method string, r *Refusal, peer connect.Peer) error {
	if r == nil {
		return nil
	}
	g.refused(ctx, method, r, peer)
	// The observer (outermost) turns this into PermissionDenied through
	// convert.WireError, the one place wire codes are made.
	return &record.Error{Code: record.CodePermission, Msg: r.Msg}
}

// AdminInterceptor holds the admin service's reads to DecideAdminRead.
// isWrite names the methods it lets through unchecked: the writes, which
// the admin service gates itself (--admin-write, --admin-clients). Every
// other method, including one added later, counts as a read. listed says
// whether a verified certificate is one the service lets write. Mount it
// with Middleware, like Interceptor.
func (g *Guard) AdminInterceptor(isWrite func(method string) bool, listed func(*x509.Certificate) bool) connect.Interceptor {
	return adminInterceptor{g: g, isWrite: isWrite, listed: listed}
}

type adminInterceptor struct {
	g       *Guard
	isWrite func(string) bool
	listed  func(*x509.Certificate) bool
}

func (i adminInterceptor) check(ctx context.Context, procedure string, peer connect.Peer) error {
	method := shortName(procedure)
	if i.isWrite(method) {
		return nil
	}
	cert, id := certOf(ctx)
	return i.g.verdict(ctx, method, DecideAdminRead(method, cert != nil, id, cert != nil && i.listed(cert)), peer)
}

func (i adminInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := i.check(ctx, req.Spec().Procedure, req.Peer()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i adminInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i adminInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := i.check(ctx, conn.Spec().Procedure, conn.Peer()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

func (g *Guard) refused(ctx context.Context, method string, r *Refusal, peer connect.Peer) {
	if !knownMethod(method) {
		method = "other" // label cardinality stays fixed
	}
	g.rejected.WithLabelValues(method, string(r.Reason)).Inc()
	g.log.Warn("caller identity refused", "method", method, "reason", string(r.Reason),
		"presented", r.Presented, "needed", r.Needed, "peer", peer.Addr, "protocol", peer.Protocol,
		"request_id", g.requestID(ctx))
	g.recent.add(Rejection{At: g.now(), Method: method, Reason: r.Reason, Presented: r.Presented,
		Needed: r.Needed, Peer: peer.Addr, Protocol: peer.Protocol})
}

func knownMethod(m string) bool {
	return slices.Contains(methods, m) || slices.Contains(AdminReads, m)
}

// Recent returns the latest refusals, newest first (for the admin page).
func (g *Guard) Recent() []Rejection { return g.recent.list() }
