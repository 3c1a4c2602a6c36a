package server

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
	"github.com/bigfleet/libvirt-provider/server/convert"
)

// RequestIDHeader carries the request id in both directions.
const RequestIDHeader = "X-Request-Id"

type requestIDKey struct{}

// RequestID returns the id the observe interceptor assigned to this RPC,
// so deeper layers can tag their own log lines with it.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// idContext carries the request id: one allocation per call, where
// context.WithValue would take two (the context and the boxed string).
type idContext struct {
	context.Context
	id string
}

func (c *idContext) Value(key any) any {
	if _, ok := key.(requestIDKey); ok {
		return c.id
	}
	return c.Context.Value(key)
}

// requestIDFrom honours a caller's id when it is sane (so a trace can be
// followed across BigFleet and us) and mints one otherwise. Ids are
// length- and charset-checked because they are echoed into logs and headers.
func requestIDFrom(h interface{ Get(string) string }) string {
	if id := h.Get(RequestIDHeader); validRequestID(id) {
		return id
	}
	return mintRequestID()
}

// Minted ids are 24 hex digits: 12 random per process, then a counter
// that starts at a random value. Unique without a call into crypto/rand
// per RPC; an id is a correlation handle, not a secret.
var (
	idPrefix [12]byte
	idSeq    atomic.Uint64
)

func init() {
	var b [14]byte
	_, _ = rand.Read(b[:])
	hex.Encode(idPrefix[:], b[:6])
	idSeq.Store(binary.LittleEndian.Uint64(b[6:]))
}

func mintRequestID() string {
	const digits = "0123456789abcdef"
	var b [24]byte
	copy(b[:], idPrefix[:])
	n := idSeq.Add(1)
	for i := len(b) - 1; i >= len(idPrefix); i-- {
		b[i] = digits[n&0xf]
		n >>= 4
	}
	return string(b[:])
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// observer is the outermost interceptor: it assigns the request id, and
// after the call logs one line and updates the RPC metrics. It sees the
// final code, including Internal from a recovered panic. It never looks at
// message bodies: bootstrap blobs and shard metadata must not reach logs.
type observer struct {
	log     *slog.Logger
	metrics *Metrics
}

func (o observer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		id := requestIDFrom(req.Header())
		res, err := next(&idContext{ctx, id}, req)
		err = convert.WireError(err)
		if res != nil {
			res.Header().Set(RequestIDHeader, id)
		}
		if err != nil { // (errors.As's target escapes: only pay for it on errors)
			var ce *connect.Error
			if errors.As(err, &ce) {
				ce.Meta().Set(RequestIDHeader, id)
			}
		}
		o.record(ctx, req.Spec().Procedure, req.Peer(), id, err, time.Since(start))
		return res, err
	}
}

func (o observer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (o observer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		id := requestIDFrom(conn.RequestHeader())
		conn.ResponseHeader().Set(RequestIDHeader, id)
		err := convert.WireError(next(&idContext{ctx, id}, conn))
		o.record(ctx, conn.Spec().Procedure, conn.Peer(), id, err, time.Since(start))
		return err
	}
}

func (o observer) record(ctx context.Context, method string, peer connect.Peer, id string, err error, d time.Duration) {
	code, level := "ok", okLevel(method)
	if err != nil {
		c := connect.CodeOf(err)
		code, level = c.String(), levelFor(c)
	}
	o.metrics.observeRPC(method, code, d)
	if !o.log.Enabled(ctx, level) {
		return // polled reads at info level: skip building the line at all
	}
	attrs := []slog.Attr{
		slog.String("method", method),
		slog.String("request_id", id),
		slog.String("peer", peer.Addr),
		slog.String("protocol", peer.Protocol),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
	}
	if err != nil {
		// Engine messages name ids and states, never blob or metadata values.
		attrs = append(attrs, slog.String("error", errorMessage(err)))
	}
	attrs = append(attrs, slog.String("code", code))
	o.log.LogAttrs(ctx, level, "rpc", attrs...)
}

// okLevel: accepted mutations are worth a line each at info; successful
// reads (a shard polls List every cycle, probes call Check) only at debug,
// or they would drown everything else.
func okLevel(method string) slog.Level {
	switch method {
	case bigfleetv1alpha1connect.CapacityProviderCreateProcedure,
		bigfleetv1alpha1connect.CapacityProviderConfigureProcedure,
		bigfleetv1alpha1connect.CapacityProviderDrainProcedure,
		bigfleetv1alpha1connect.CapacityProviderDeleteProcedure:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

func levelFor(c connect.Code) slog.Level {
	switch c {
	case connect.CodeInternal, connect.CodeUnknown, connect.CodeDataLoss:
		return slog.LevelError
	case connect.CodeUnavailable:
		return slog.LevelWarn
	default:
		return slog.LevelInfo
	}
}

func errorMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// recoverer is the innermost interceptor: a panic in a handler becomes
// Internal for that one RPC instead of a dead stream, and is counted and
// logged with its stack. The panic value is logged, never sent.
type recoverer struct {
	log     *slog.Logger
	metrics *Metrics
}

func (r recoverer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (res connect.AnyResponse, err error) {
		// recover is called in the deferred closure itself (it must be); a
		// closure, unlike passing &err to a method, keeps err off the heap.
		defer func() {
			if v := recover(); v != nil {
				err = r.caught(ctx, req.Spec().Procedure, v)
			}
		}()
		return next(ctx, req)
	}
}

func (r recoverer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (r recoverer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = r.caught(ctx, conn.Spec().Procedure, v)
			}
		}()
		return next(ctx, conn)
	}
}

// caught counts and logs a recovered panic and returns the error sent.
func (r recoverer) caught(ctx context.Context, method string, v any) error {
	r.metrics.panics.Inc()
	r.log.LogAttrs(ctx, slog.LevelError, "panic recovered",
		slog.String("method", method),
		slog.String("request_id", RequestID(ctx)),
		slog.Any("panic", v),
		slog.String("stack", string(debug.Stack())))
	return convert.WireError(errPanic)
}
