package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
)

// TestGate: a standby refuses every CapacityProvider call with Unavailable
// naming the leader, before the engine sees it; health still answers
// (NOT_SERVING); once open, calls reach the engine; once stopped, it never
// opens again.
func TestGate(t *testing.T) {
	t.Parallel()
	eng := newFakeEngine()
	g := NewGate("pod-b")
	status := NewStatus()
	status.AddProbe(g.Ready)
	srv := httptest.NewUnstartedServer(NewHandler(Options{Engine: eng, Status: status, Gate: g}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cp := bigfleetv1alpha1connect.NewCapacityProviderClient(srv.Client(), srv.URL, connect.WithGRPC())
	health := grpchealth.NewClient(srv.Client(), srv.URL, connect.WithGRPC())
	list := func() error {
		_, err := cp.List(t.Context(), connect.NewRequest(&pb.ListFilter{}))
		return err
	}
	checkHealth := func(want grpchealth.Status) {
		t.Helper()
		res, err := health.Check(t.Context(), &grpchealth.CheckRequest{})
		if err != nil || res.Status != want {
			t.Fatalf("health = %v, %v; want %v", res, err, want)
		}
	}

	err := list()
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "no leader elected yet") {
		t.Fatalf("standby before any leader: %v", err)
	}
	g.SetLeader("pod-a")
	err = list()
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "the leader is pod-a") {
		t.Fatalf("standby: %v; want Unavailable naming pod-a", err)
	}
	_, err = cp.Create(t.Context(), connect.NewRequest(&pb.CreateRequest{MachineId: "m1"}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("standby Create: %v", err)
	}
	eng.mu.Lock()
	_, created := eng.machines["m1"]
	eng.mu.Unlock()
	if created {
		t.Fatal("a refused Create reached the engine")
	}
	checkHealth(grpchealth.StatusNotServing)
	if g.Ready() == nil {
		t.Fatal("standby is ready")
	}

	g.SetLeader("pod-b")
	if !g.Open() {
		t.Fatal("Open refused on a closed gate")
	}
	if err := list(); err != nil {
		t.Fatalf("leader List: %v", err)
	}
	checkHealth(grpchealth.StatusServing)

	g.Stop()
	err = list()
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "lost its lease") {
		t.Fatalf("stopped leader: %v", err)
	}
	if g.Open() {
		t.Fatal("a stopped gate opened again")
	}
	checkHealth(grpchealth.StatusNotServing)
}

// TestNilGate: without --leader-elect nothing is refused.
func TestNilGate(t *testing.T) {
	t.Parallel()
	var g *Gate
	if !g.Acting() || g.Refuse() != nil || g.Ready() != nil {
		t.Fatal("nil gate refuses")
	}
}

// TestGateCoversMounted: services mounted beside CapacityProvider (the
// admin API) get the gate through the interceptors Mount hands them.
func TestGateCoversMounted(t *testing.T) {
	t.Parallel()
	g := NewGate("pod-b")
	g.SetLeader("pod-a")
	r := grpcreflect.NewStaticReflector("x.Y")
	srv := httptest.NewUnstartedServer(NewHandler(Options{Engine: newFakeEngine(), Gate: g,
		Mount: []func(*http.ServeMux, connect.HandlerOption){func(mux *http.ServeMux, ic connect.HandlerOption) {
			mux.Handle(grpcreflect.NewHandlerV1(r, ic))
		}}}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c := grpcreflect.NewClient(srv.Client(), srv.URL, connect.WithGRPC())
	stream := c.NewStream(t.Context())
	_, err := stream.ListServices()
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "the leader is pod-a") {
		t.Fatalf("mounted service on a standby: %v; want Unavailable naming pod-a", err)
	}
	_, _ = stream.Close()
	g.Open()
	stream = c.NewStream(t.Context())
	defer func() { _, _ = stream.Close() }()
	if _, err := stream.ListServices(); err != nil {
		t.Fatalf("mounted service on the leader: %v", err)
	}
}
