package server

import (
	"io"
	"log/slog"
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
	"github.com/bigfleet/libvirt-provider/server/callerid"
)

// MaxRequestBytes caps one decoded request message. The contract's largest
// field, the bootstrap blob, is capped at 4 MiB; the rest is headroom for
// metadata and framing, not an invitation.
const MaxRequestBytes = 8 << 20

// Options configures NewHandler. Engine is required; the zero value of
// everything else is usable.
type Options struct {
	Engine  Engine
	Logger  *slog.Logger // nil: discard
	Metrics *Metrics     // nil: a private registry nobody scrapes
	Status  *Status      // nil: always serving

	// Reflection mounts grpc.reflection v1 and v1alpha (for grpcurl,
	// buf curl and friends).
	Reflection bool
	// Guard binds CapacityProvider calls to the caller's client certificate
	// (--caller-identity=bigfleet under mTLS); nil: no binding (plaintext,
	// server-only TLS, or --caller-identity=any).
	Guard *callerid.Guard

	// ReflectionNames are extra fully-qualified service names reflection
	// lists (services added through Mount, such as the admin API).
	ReflectionNames []string

	// Mount lets other components (the admin API and its web page) add
	// routes to the same mux, and so the same listener, TLS and limits.
	// Each is called once with the mux after the built-in routes exist.
	// Pass Interceptors() to connect handlers mounted this way so they get
	// request ids, logs, metrics and panic recovery too.
	Mount []func(mux *http.ServeMux, interceptors connect.HandlerOption)

	// Gate, under --leader-elect, refuses every call but health checks
	// while this process is not the acting leader; nil: always open.
	Gate *Gate
}

// NewHandler builds the mux served on --addr: CapacityProvider (gRPC,
// gRPC-Web and Connect at once — connect-go negotiates per request),
// grpc.health.v1, optional reflection, and whatever Mount adds.
func NewHandler(opts Options) http.Handler {
	if opts.Engine == nil {
		panic("server.NewHandler: Options.Engine is nil")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	metrics := opts.Metrics
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	status := opts.Status
	if status == nil {
		status = NewStatus()
	}
	ics := []connect.Interceptor{observer{log: log, metrics: metrics}}
	if opts.Gate != nil {
		ics = append(ics, gateInterceptor{opts.Gate})
	}
	ic := connect.WithInterceptors(append(ics, recoverer{log: log, metrics: metrics})...)
	common := []connect.HandlerOption{ic, connect.WithReadMaxBytes(MaxRequestBytes)}

	mux := http.NewServeMux()
	// CapacityProvider's Get and List answer with cached encodings that only
	// the JSON codecs registered here know how to turn back into JSON.
	mux.Handle(capacityProvider(opts.Engine, opts.Guard, append(common, jsonCodecs())))
	mux.Handle(grpchealth.NewHandler(healthChecker{status: status}, common...))
	if opts.Reflection {
		names := append([]string{bigfleetv1alpha1connect.CapacityProviderName, grpchealth.HealthV1ServiceName}, opts.ReflectionNames...)
		r := grpcreflect.NewStaticReflector(names...)
		mux.Handle(grpcreflect.NewHandlerV1(r, common...))
		mux.Handle(grpcreflect.NewHandlerV1Alpha(r, common...))
	}
	for _, mount := range opts.Mount {
		mount(mux, ic)
	}
	return mux
}

// capacityProvider is the CapacityProvider route, behind the guard when
// there is one: its interceptor runs innermost, after the request id is
// assigned (so the refusal is logged with it) and before the service, so
// a refused call never reaches the engine or its fence.
func capacityProvider(eng Engine, guard *callerid.Guard, opts []connect.HandlerOption) (string, http.Handler) {
	svc := &service{engine: eng}
	if guard == nil {
		return bigfleetv1alpha1connect.NewCapacityProviderHandler(svc, opts...)
	}
	path, h := bigfleetv1alpha1connect.NewCapacityProviderHandler(svc,
		append(opts, connect.WithInterceptors(guard.Interceptor()))...)
	return path, guard.Middleware(h)
}
