package admin_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
)

const svc = "/libvirtprovider.admin.v1.AdminService/"

// TestGRPCGo: grpc-go, the stack BigFleet uses, reaches the admin API over
// h2c and TLS, including the server stream and PermissionDenied.
func TestGRPCGo(t *testing.T) {
	t.Parallel()
	for _, useTLS := range []bool{false, true} {
		name := map[bool]string{false: "h2c", true: "tls"}[useTLS]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := admintest.Start(t, admintest.Options{TLS: useTLS})
			creds := insecure.NewCredentials()
			if useTLS {
				creds = credentials.NewTLS(s.TLSConfig)
			}
			conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx := ctxTimeout(t)

			var list adminv1.ListMachinesResponse
			if err := conn.Invoke(ctx, svc+"ListMachines", &adminv1.ListMachinesRequest{}, &list); err != nil {
				t.Fatal(err)
			}
			if len(list.GetMachines()) != 4 {
				t.Errorf("got %d machines", len(list.GetMachines()))
			}
			var rel adminv1.ReleaseMachineResponse
			err = conn.Invoke(ctx, svc+"ReleaseMachine", &adminv1.ReleaseMachineRequest{Id: "m-000"}, &rel)
			if status.Code(err) != codes.PermissionDenied {
				t.Errorf("release: %v", err)
			}

			st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, svc+"WatchMachines")
			if err != nil {
				t.Fatal(err)
			}
			if err := st.SendMsg(&adminv1.WatchMachinesRequest{}); err != nil {
				t.Fatal(err)
			}
			_ = st.CloseSend()
			var ev adminv1.WatchMachinesResponse
			if err := st.RecvMsg(&ev); err != nil || ev.GetType() != adminv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT || len(ev.GetMachines()) != 4 {
				t.Fatalf("snapshot: %v %v", &ev, err)
			}
			if err := st.RecvMsg(&ev); err != nil || ev.GetType() != adminv1.WatchEventType_WATCH_EVENT_TYPE_SYNCED {
				t.Fatalf("synced: %v %v", &ev, err)
			}
		})
	}
}

// TestReflectionListsAdmin: grpcurl and buf curl can discover the admin API.
func TestReflectionListsAdmin(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{})
	rc := grpcreflect.NewClient(s.HTTPClient(), s.URL, connect.WithGRPC())
	st := rc.NewStream(t.Context())
	defer st.Close()
	names, err := st.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range names {
		found = found || string(n) == admin.ServiceName
	}
	if !found {
		t.Errorf("reflection lists %v, not %s", names, admin.ServiceName)
	}
}

// TestPageRoutes: the page lives at exactly "/" and its assets under
// "/ui/"; RPC paths, unknown services and other methods never get HTML.
func TestPageRoutes(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{})
	hc := s.HTTPClient()
	get := func(method, path string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, s.URL+path, nil)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	res, body := get("GET", "/")
	if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(body, "/ui/app.js") || !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("GET / = %d %v\n%s", res.StatusCode, res.Header, body)
	}
	for _, a := range []struct{ path, ctype string }{{"/ui/app.js", "javascript"}, {"/ui/app.css", "text/css"}} {
		if res, _ := get("GET", a.path); res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Type"), a.ctype) {
			t.Errorf("GET %s = %d %s", a.path, res.StatusCode, res.Header.Get("Content-Type"))
		}
	}
	for _, path := range []string{"/nope", "/ui/missing.js", "/foo.v1.Bar/Baz", "/index.html"} {
		if res, _ := get("GET", path); res.StatusCode != 404 {
			t.Errorf("GET %s = %d, want 404", path, res.StatusCode)
		}
	}
	if res, _ := get("POST", "/"); res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST / = %d", res.StatusCode)
	}
	// Unknown procedures on the admin service are still RPC errors.
	var ce *connect.Error
	_, err := adminv1ClientRaw(s).CallUnary(t.Context(), connect.NewRequest(&adminv1.GetMachineRequest{Id: "x"}))
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnimplemented {
		t.Errorf("unknown procedure: %v", err)
	}
}

func adminv1ClientRaw(s *admintest.Server) *connect.Client[adminv1.GetMachineRequest, adminv1.GetMachineResponse] {
	return connect.NewClient[adminv1.GetMachineRequest, adminv1.GetMachineResponse](s.HTTPClient(), s.URL+svc+"NoSuchMethod")
}
