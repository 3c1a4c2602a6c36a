package server

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
)

func TestHealth(t *testing.T) {
	t.Parallel()
	ts := startServer(t, modeH2C)
	hc := healthpb.NewHealthClient(dialGRPC(t, ts, nil))
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		res, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("Check(%q): %v", service, err)
		}
		return res.GetStatus()
	}
	const svc = bigfleetv1alpha1connect.CapacityProviderName
	if check("") != healthpb.HealthCheckResponse_SERVING || check(svc) != healthpb.HealthCheckResponse_SERVING {
		t.Fatal("fresh server is not SERVING")
	}
	_, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "no.such.Service"})
	if codeOfErr(err) != connect.CodeNotFound {
		t.Errorf("unknown service: %v", err)
	}

	ts.status.SetServing(false)
	if check("") != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Error("SetServing(false) still SERVING")
	}
	ts.status.SetServing(true)
	storeOpen := true
	ts.status.AddProbe(func() error {
		if !storeOpen {
			return errors.New("store closed")
		}
		return nil
	})
	if check(svc) != healthpb.HealthCheckResponse_SERVING {
		t.Error("passing probe made it NOT_SERVING")
	}
	storeOpen = false
	if check(svc) != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Error("failing probe still SERVING")
	}
	storeOpen = true
	ts.status.BeginShutdown()
	ts.status.SetServing(true) // cannot undo a shutdown
	if check("") != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Error("shutting down but SERVING")
	}
}

func TestReflection(t *testing.T) {
	t.Parallel()
	ts := startServer(t, modeH2C)
	conn := dialGRPC(t, ts, nil)
	want := []string{bigfleetv1alpha1connect.CapacityProviderName, "grpc.health.v1.Health"}

	s1, err := reflectv1.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Send(&reflectv1.ServerReflectionRequest{MessageRequest: &reflectv1.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r1, err := s1.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range r1.GetListServicesResponse().GetService() {
		got = append(got, s.GetName())
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("v1 reflection lists %v, missing %s", got, w)
		}
	}
	_ = s1.CloseSend()

	s2, err := reflectv1alpha.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_ = s2.Send(&reflectv1alpha.ServerReflectionRequest{
		MessageRequest: &reflectv1alpha.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: want[0]}})
	r2, err := s2.Recv()
	if err != nil || len(r2.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Errorf("v1alpha file for %s: %v %v", want[0], r2, err)
	}
	_ = s2.CloseSend()
}

func TestReflectionDisabled(t *testing.T) {
	t.Parallel()
	h := NewHandler(Options{Engine: newFakeEngine()})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("reflection off: status %d", rec.Code)
	}
}

// TestMount: another component's routes share the mux and the interceptors.
func TestMount(t *testing.T) {
	t.Parallel()
	var gotOpt connect.HandlerOption
	h := NewHandler(Options{Engine: newFakeEngine(), Mount: []func(*http.ServeMux, connect.HandlerOption){
		func(mux *http.ServeMux, ic connect.HandlerOption) {
			gotOpt = ic
			mux.HandleFunc("GET /admin/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "admin page") })
		},
	}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/", nil))
	if rec.Body.String() != "admin page" || gotOpt == nil {
		t.Errorf("mounted route: %d %q", rec.Code, rec.Body)
	}
}

// TestOpsEndpoints: /metrics, /healthz and /readyz, including the flip to
// 503 as soon as shutdown begins.
func TestOpsEndpoints(t *testing.T) {
	t.Parallel()
	ts := startServer(t, modeH2C)
	if _, err := (grpcClient{dialGRPC(t, ts, nil)}).call(t.Context(), bigfleetv1alpha1connect.CapacityProviderGetProcedure,
		&pb.MachineRef{Id: "m-spec"}, &pb.Machine{}); err != nil {
		t.Fatal(err)
	}
	ts.metrics.TransitionFinished("create", "z1", "succeeded", 3e9)
	ts.metrics.StoreCommitted(2e6, 3)
	ops := httptest.NewServer(NewOpsHandler(ts.metrics, ts.status))
	defer ops.Close()
	get := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get(ops.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body := get("/metrics")
	for _, want := range []string{
		`rpc_requests_total{code="ok",method="/bigfleet.v1alpha1.CapacityProvider/Get"} 1`,
		`rpc_duration_seconds_count{method="/bigfleet.v1alpha1.CapacityProvider/Get"} 1`,
		`machines{state="IDLE",zone="z1"} 1`,
		`machines{state="FAILED",zone="z1"} 0`,
		`transition_duration_seconds_count{kind="create",outcome="succeeded",zone="z1"} 1`,
		`store_commit_duration_seconds_count 1`,
		`panics_recovered_total 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz %d before shutdown", code)
	}
	ts.status.BeginShutdown()
	if code, _ := get("/readyz"); code != 503 {
		t.Errorf("/readyz %d after BeginShutdown", code)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz %d while draining; liveness must stay up", code)
	}
}
