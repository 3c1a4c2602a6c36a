package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1/adminv1connect"
)

// adminRead is one read of the admin service, called through each client
// stack: req is its request for grpc-go, viaConnect the generated Connect
// client's call (both for a machine id that exists).
type adminRead struct {
	name       string
	req, resp  proto.Message
	stream     bool
	viaConnect func(ctx context.Context, c adminv1connect.AdminServiceClient) error
}

func adminReads(id string) []adminRead {
	return []adminRead{
		{"GetFleetSummary", &adminv1.GetFleetSummaryRequest{}, new(adminv1.GetFleetSummaryResponse), false,
			func(ctx context.Context, c adminv1connect.AdminServiceClient) error {
				_, err := c.GetFleetSummary(ctx, connect.NewRequest(&adminv1.GetFleetSummaryRequest{}))
				return err
			}},
		{"ListHosts", &adminv1.ListHostsRequest{}, new(adminv1.ListHostsResponse), false,
			func(ctx context.Context, c adminv1connect.AdminServiceClient) error {
				_, err := c.ListHosts(ctx, connect.NewRequest(&adminv1.ListHostsRequest{}))
				return err
			}},
		{"ListMachines", &adminv1.ListMachinesRequest{}, new(adminv1.ListMachinesResponse), false,
			func(ctx context.Context, c adminv1connect.AdminServiceClient) error {
				_, err := c.ListMachines(ctx, connect.NewRequest(&adminv1.ListMachinesRequest{}))
				return err
			}},
		{"GetMachine", &adminv1.GetMachineRequest{Id: id}, new(adminv1.GetMachineResponse), false,
			func(ctx context.Context, c adminv1connect.AdminServiceClient) error {
				_, err := c.GetMachine(ctx, connect.NewRequest(&adminv1.GetMachineRequest{Id: id}))
				return err
			}},
		{"GetMachineHistory", &adminv1.GetMachineHistoryRequest{Id: id}, new(adminv1.GetMachineHistoryResponse), false,
			func(ctx context.Context, c adminv1connect.AdminServiceClient) error {
				_, err := c.GetMachineHistory(ctx, connect.NewRequest(&adminv1.GetMachineHistoryRequest{Id: id}))
				return err
			}},
		{"ListFenceMarks", &adminv1.ListFenceMarksRequest{}, new(adminv1.ListFenceMarksResponse), false,
			func(ctx context.Context, c adminv1connect.AdminServiceClient) error {
				_, err := c.ListFenceMarks(ctx, connect.NewRequest(&adminv1.ListFenceMarksRequest{}))
				return err
			}},
		{"WatchMachines", &adminv1.WatchMachinesRequest{}, new(adminv1.WatchMachinesResponse), true,
			func(ctx context.Context, c adminv1connect.AdminServiceClient) error {
				st, err := c.WatchMachines(ctx, connect.NewRequest(&adminv1.WatchMachinesRequest{}))
				if err != nil {
					return err
				}
				defer st.Close()
				if !st.Receive() { // the snapshot's first event, or the refusal
					return st.Err()
				}
				return nil
			}},
		{"ListIdentityRefusals", &adminv1.ListIdentityRefusalsRequest{}, new(adminv1.ListIdentityRefusalsResponse), false,
			func(ctx context.Context, c adminv1connect.AdminServiceClient) error {
				_, err := c.ListIdentityRefusals(ctx, connect.NewRequest(&adminv1.ListIdentityRefusalsRequest{}))
				return err
			}},
		{"WhoAmI", &adminv1.WhoAmIRequest{}, new(adminv1.WhoAmIResponse), false,
			func(ctx context.Context, c adminv1connect.AdminServiceClient) error {
				_, err := c.WhoAmI(ctx, connect.NewRequest(&adminv1.WhoAmIRequest{}))
				return err
			}},
	}
}

// grpcAdminRead is r through grpc-go, the server stream up to its first
// event.
func grpcAdminRead(ctx context.Context, c client, r adminRead) connect.Code {
	if !r.stream {
		return connect.Code(status.Code(c.conn.Invoke(ctx, adminSvc+r.name, r.req, r.resp)))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, adminSvc+r.name)
	if err == nil {
		err = st.SendMsg(r.req)
	}
	if err == nil {
		_ = st.CloseSend()
		err = st.RecvMsg(r.resp)
	}
	return connect.Code(status.Code(err))
}

func adminConnectClient(t *testing.T, addr string, cfg *tls.Config, opt connect.ClientOption) adminv1connect.AdminServiceClient {
	tr := &http.Transport{TLSClientConfig: cfg}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return adminv1connect.NewAdminServiceClient(&http.Client{Transport: tr}, "https://"+addr, opt)
}

// adminIdentities are issue 39's certificates, and whether each may read
// the admin service under --caller-identity=bigfleet.
var adminIdentities = []struct {
	name string
	sans []string
	may  bool
}{
	{"admin", []string{"bigfleet://admin"}, true},
	{"readonly", []string{"bigfleet://readonly"}, true},
	{"shard", []string{"shard-s1.bigfleet.svc", "bigfleet://shard/s1"}, false},
	{"no bigfleet SAN", []string{"plain.bigfleet.svc"}, false},
	{"two bigfleet SANs", []string{"bigfleet://readonly", "bigfleet://admin"}, false},
	{"DNS SAN spelling the URI", []string{"dns:bigfleet://admin", "dns:BIGFLEET://READONLY"}, false},
}

// TestAdminReadsFollowCallerIdentity is issue 39's table: each admin read
// × each certificate × each client stack, on --addr and on a separate
// --admin-addr, under --caller-identity=bigfleet (the default under
// mTLS), and with --admin-write on (whose default --admin-clients,
// uri:bigfleet://admin, may read too: the table must not change).
// Refusals are PermissionDenied with CapacityProvider's message shape,
// WARN line, metric and refusal list.
func TestAdminReadsFollowCallerIdentity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		separate, write bool
	}{{"on --addr", false, false}, {"on --admin-addr", true, false}, {"on --addr with --admin-write", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			adminReadsTable(t, tc.separate, tc.write)
		})
	}
}

func adminReadsTable(t *testing.T, separate, write bool) {
	ca := newTestCA(t, "bigfleet-ca")
	srv := ca.issue(t, "server")
	args := []string{"--use-fake-backend", "--seed-count=2", "--metrics-addr=127.0.0.1:0",
		"--tls-cert=" + srv.certFile, "--tls-key=" + srv.keyFile, "--tls-ca=" + ca.file}
	if separate {
		args = append(args, "--admin-addr=127.0.0.1:0")
	}
	if write {
		args = append(args, "--admin-write")
	}
	p := startProvider(t, args...)
	serving := p.logLines("serving")
	if len(serving) != 1 || !strings.Contains(serving[0]["caller_identity"].(string), "admin reads need bigfleet://admin or bigfleet://readonly") {
		t.Fatalf("serving log = %v", serving)
	}
	addr := p.addr
	if separate {
		addr = serving[0]["admin_addr"].(string)
		if addr == p.addr {
			t.Fatalf("admin_addr %s is --addr", addr)
		}
	}
	admin := dialTLS(t, addr, clientTLS(ca, ptr(ca.issue(t, "ctl", "bigfleet://admin"))))
	id := dialTLS(t, p.addr, clientTLS(ca, ptr(ca.issue(t, "dash", "bigfleet://readonly")))).list(t).GetMachines()[0].GetId()
	reads := adminReads(id)

	var table strings.Builder
	names := make([]string, len(reads))
	for i, r := range reads {
		names[i] = r.name
	}
	fmt.Fprintf(&table, "| certificate | client | %s |\n", strings.Join(names, " | "))
	refused := 0
	for _, ident := range adminIdentities {
		cfg := clientTLS(ca, ptr(ca.issue(t, "c", ident.sans...)))
		grpcGo := dialTLS(t, addr, cfg)
		stacks := []struct {
			name string
			call func(adminRead) connect.Code
		}{
			{"grpc-go", func(r adminRead) connect.Code { return grpcAdminRead(t.Context(), grpcGo, r) }},
			{"connect-json", connectRead(t, adminConnectClient(t, addr, cfg, connect.WithProtoJSON()))},
			{"grpc-web", connectRead(t, adminConnectClient(t, addr, cfg, connect.WithGRPCWeb()))},
		}
		want := connect.CodePermissionDenied
		if ident.may {
			want = 0
		}
		for _, s := range stacks {
			codes := make([]string, len(reads))
			for i, r := range reads {
				got := s.call(r)
				if got != want {
					t.Errorf("%s, %s, %s: %v; want %v", ident.name, s.name, r.name, codeName(got), codeName(want))
				}
				if got == connect.CodePermissionDenied {
					refused++
				}
				codes[i] = codeName(got)
			}
			fmt.Fprintf(&table, "| %s | %s | %s |\n", ident.name, s.name, strings.Join(codes, " | "))
		}
	}
	t.Logf("admin reads over the wire (%s):\n%s", t.Name(), table.String())

	warns := p.logLines("caller identity refused")
	if len(warns) != refused {
		t.Errorf("%d refusal log lines; want one per refused call (%d)", len(warns), refused)
	}
	for _, w := range warns {
		if w["level"] != "WARN" || strings.Contains(fmt.Sprint(w), "plain.bigfleet.svc") || strings.Contains(fmt.Sprint(w), "shard-s1.bigfleet.svc") {
			t.Errorf("refusal line %v: want WARN, naming no DNS SAN", w)
		}
	}
	metrics := get(t, "http://"+p.logLines("metrics server listening")[0]["metrics_addr"].(string)+"/metrics", nil)
	for _, want := range []string{
		`identity_rejected_total{method="GetMachine",reason="role_may_not_read_admin"} 3`,
		`identity_rejected_total{method="ListFenceMarks",reason="no_bigfleet_san"} 6`, // no SAN and the DNS spellings
		`identity_rejected_total{method="WatchMachines",reason="several_bigfleet_sans"} 3`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The refusal list shows them, with CapacityProvider's message shape.
	out := new(adminv1.ListIdentityRefusalsResponse)
	if err := admin.admin(t, "ListIdentityRefusals", &adminv1.ListIdentityRefusalsRequest{}, out); err != nil {
		t.Fatal(err)
	}
	if len(out.GetRefusals()) == 0 || out.GetRefusals()[0].GetNeeded() != "a URI SAN bigfleet://admin or bigfleet://readonly (or a certificate --admin-clients lists)" {
		t.Errorf("ListIdentityRefusals newest = %v", first(out.GetRefusals()))
	}
	shard := dialTLS(t, addr, clientTLS(ca, ptr(ca.issue(t, "s1", "bigfleet://shard/s1"))))
	err := shard.admin(t, "ListFenceMarks", &adminv1.ListFenceMarksRequest{}, new(adminv1.ListFenceMarksResponse))
	if msg := status.Convert(err).Message(); !strings.HasPrefix(msg, "caller identity: ListFenceMarks needs a URI SAN bigfleet://admin or bigfleet://readonly") ||
		!strings.Contains(msg, "presented bigfleet://shard/s1") {
		t.Errorf("shard's refusal message = %q", msg)
	}
}

func connectRead(t *testing.T, c adminv1connect.AdminServiceClient) func(adminRead) connect.Code {
	return func(r adminRead) connect.Code {
		if err := r.viaConnect(t.Context(), c); err != nil {
			return connect.CodeOf(err)
		}
		return 0
	}
}

// TestAdminReadsUnderAny: --caller-identity=any keeps the documented
// behaviour (every certificate the CA signed may read the admin service)
// and the serving line says so; writes still need --admin-clients.
func TestAdminReadsUnderAny(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "bigfleet-ca")
	srv := ca.issue(t, "server")
	p := startProvider(t, "--use-fake-backend", "--seed-count=1", "--metrics-addr=", "--caller-identity=any",
		"--tls-cert="+srv.certFile, "--tls-key="+srv.keyFile, "--tls-ca="+ca.file, "--admin-write")
	if s := p.logLines("serving"); len(s) != 1 || !strings.Contains(s[0]["caller_identity"].(string), "admin reads included") {
		t.Fatalf("serving log = %v; want caller_identity any, naming admin reads", s)
	}
	plain := dialTLS(t, p.addr, clientTLS(ca, ptr(ca.issue(t, "plain", "plain.bigfleet.svc"))))
	for _, r := range adminReads(plain.list(t).GetMachines()[0].GetId()) {
		if code := grpcAdminRead(t.Context(), plain, r); code != 0 {
			t.Errorf("%s by a certificate without a bigfleet SAN under any: %v", r.name, code)
		}
	}
	wantCode(t, "write by it", plain.admin(t, "TriggerReconcile", &adminv1.TriggerReconcileRequest{},
		new(adminv1.TriggerReconcileResponse)), codes.PermissionDenied)
}
