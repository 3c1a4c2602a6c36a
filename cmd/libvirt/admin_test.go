package main

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

const adminSvc = "/libvirtprovider.admin.v1.AdminService/"

func (c client) admin(t *testing.T, method string, req, out proto.Message) error {
	t.Helper()
	return c.conn.Invoke(t.Context(), adminSvc+method, req, out)
}

func (c client) whoAmI(t *testing.T) *adminv1.WhoAmIResponse {
	t.Helper()
	out := new(adminv1.WhoAmIResponse)
	if err := c.admin(t, "WhoAmI", &adminv1.WhoAmIRequest{}, out); err != nil {
		t.Fatalf("WhoAmI: %v", err)
	}
	return out
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if status.Code(err) != want {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// TestAdminWritesByIdentity: on the shared mTLS listener, a BigFleet
// shard's certificate may neither read nor write the admin API; an operator certificate matching
// --admin-clients releases a FAILED machine; no certificate gets no
// further than the handshake. Writes are logged and counted per identity.
func TestAdminWritesByIdentity(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "ca")
	srv := ca.issue(t, "server")
	bf, alice := ca.issue(t, "bigfleet", "bigfleet.test", "bigfleet://shard/s1"), ca.issue(t, "alice", "alice.ops.test")
	// A Create slower than its timeout leaves a FAILED machine to release.
	p := startProvider(t, "--use-fake-backend", "--seed-count=2", "--metrics-addr=127.0.0.1:0",
		"--fake-delay=2s", "--create-timeout=50ms", "--shutdown-timeout=100ms",
		"--tls-cert="+srv.certFile, "--tls-key="+srv.keyFile, "--tls-ca="+ca.file,
		"--admin-write", "--admin-clients=*.ops.test")
	bigfleet, ops := dialTLS(t, p.addr, clientTLS(ca, &bf)), dialTLS(t, p.addr, clientTLS(ca, &alice))
	id := bigfleet.list(t).GetMachines()[0].GetId()
	bigfleet.call(t, "Create", &pb.CreateRequest{MachineId: id, ShardId: "s1", ShardEpoch: 1, SequenceNumber: 1})
	bigfleet.waitState(t, id, pb.MachineState_MACHINE_STATE_FAILED)

	// A shard's certificate reads no admin API under --caller-identity=bigfleet
	// (issue 39), WhoAmI included.
	wantCode(t, "WhoAmI by a shard", bigfleet.admin(t, "WhoAmI", &adminv1.WhoAmIRequest{}, new(adminv1.WhoAmIResponse)), codes.PermissionDenied)
	release := &adminv1.ReleaseMachineRequest{Id: id}
	wantCode(t, "release by BigFleet", bigfleet.admin(t, "ReleaseMachine", release, new(adminv1.ReleaseMachineResponse)), codes.PermissionDenied)
	wantCode(t, "reconcile by BigFleet", bigfleet.admin(t, "TriggerReconcile", &adminv1.TriggerReconcileRequest{}, new(adminv1.TriggerReconcileResponse)), codes.PermissionDenied)
	anon := dialTLS(t, p.addr, clientTLS(ca, nil))
	wantCode(t, "release without a certificate", anon.admin(t, "ReleaseMachine", release, new(adminv1.ReleaseMachineResponse)), codes.Unavailable)
	if m := bigfleet.get(t, id); m.GetState() != pb.MachineState_MACHINE_STATE_FAILED {
		t.Fatalf("refused releases changed %s to %s", id, m.GetState())
	}

	if w := ops.whoAmI(t); w.GetIdentity() != "alice.ops.test" || !w.GetMayWrite() || w.GetAnonymous() {
		t.Errorf("operator's WhoAmI = %v", w)
	}
	res := new(adminv1.ReleaseMachineResponse)
	if err := ops.admin(t, "ReleaseMachine", release, res); err != nil {
		t.Fatalf("release by the operator: %v", err)
	}
	if s := res.GetMachine().GetMachine().GetState(); s != pb.MachineState_MACHINE_STATE_DELETING {
		t.Errorf("released machine is %s", s)
	}

	ok, refused := p.logLines("admin write"), p.logLines("admin write refused")
	if len(ok) != 1 || ok[0]["identity"] != "alice.ops.test" || ok[0]["allowed_by"] != "*.ops.test" || ok[0]["level"] != "INFO" {
		t.Errorf("write log = %v", ok)
	}
	if len(refused) != 2 || refused[0]["identity"] != "bigfleet://shard/s1" {
		t.Errorf("refusal log = %v", refused)
	}
	metrics := get(t, "http://"+p.logLines("metrics server listening")[0]["metrics_addr"].(string)+"/metrics", nil)
	for _, want := range []string{
		`admin_writes_total{action="release",identity="*.ops.test",result="ok"} 1`,
		`admin_writes_total{action="release",identity="unlisted",result="denied"} 1`,
		`admin_writes_total{action="reconcile",identity="unlisted",result="denied"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestAdminListener: --admin-addr serves the admin API and page alone,
// verifying clients against --admin-tls-ca; --addr keeps BigFleet's CA and
// no longer serves the admin API. Each CA's certificates reach only their
// own listener.
func TestAdminListener(t *testing.T) {
	t.Parallel()
	bfCA, opsCA := newTestCA(t, "bigfleet-ca"), newTestCA(t, "ops-ca")
	srv, bf := bfCA.issue(t, "server"), bfCA.issue(t, "bigfleet", "bigfleet.test", "bigfleet://shard/s1")
	alice, mallory := opsCA.issue(t, "alice", "alice.ops.test"), opsCA.issue(t, "mallory", "mallory.ops.test")
	p := startProvider(t, "--use-fake-backend", "--seed-count=2", "--metrics-addr=",
		"--tls-cert="+srv.certFile, "--tls-key="+srv.keyFile, "--tls-ca="+bfCA.file,
		"--admin-addr=127.0.0.1:0", "--admin-tls-ca="+opsCA.file, "--admin-write", "--admin-clients=alice.ops.test")
	serving := p.logLines("serving")
	if len(serving) != 1 || serving[0]["admin_security"] != "mtls" || serving[0]["security"] != "mtls" {
		t.Fatalf("serving log = %v", serving)
	}
	adminAddr := serving[0]["admin_addr"].(string)
	if !strings.Contains(p.stdout.String(), "admin API and page on "+adminAddr+" (mtls)") {
		t.Errorf("banner lacks the admin listener:\n%s", p.stdout)
	}
	// The server certificate is shared; trust it with the BigFleet CA.
	opsTLS := func(l *leaf) *tls.Config { return clientTLS(bfCA, l) }

	ops := dialTLS(t, adminAddr, opsTLS(&alice))
	if w := ops.whoAmI(t); w.GetIdentity() != "alice.ops.test" || !w.GetMayWrite() {
		t.Errorf("operator's WhoAmI = %v", w)
	}
	if err := ops.admin(t, "TriggerReconcile", &adminv1.TriggerReconcileRequest{}, new(adminv1.TriggerReconcileResponse)); err != nil {
		t.Errorf("reconcile by the operator: %v", err)
	}
	other := dialTLS(t, adminAddr, opsTLS(&mallory))
	wantCode(t, "reconcile by an unlisted operator", other.admin(t, "TriggerReconcile", &adminv1.TriggerReconcileRequest{}, new(adminv1.TriggerReconcileResponse)), codes.PermissionDenied)
	wantCode(t, "CapacityProvider on the admin listener", ops.conn.Invoke(t.Context(),
		"/bigfleet.v1alpha1.CapacityProvider/List", &pb.ListFilter{}, new(pb.MachineList)), codes.Unimplemented)

	bigfleet := dialTLS(t, p.addr, clientTLS(bfCA, &bf))
	if n := len(bigfleet.list(t).GetMachines()); n != 2 {
		t.Errorf("List on --addr = %d", n)
	}
	wantCode(t, "admin API on --addr", bigfleet.admin(t, "WhoAmI", &adminv1.WhoAmIRequest{}, new(adminv1.WhoAmIResponse)), codes.Unimplemented)
	wantCode(t, "BigFleet's certificate on the admin listener", dialTLS(t, adminAddr, clientTLS(bfCA, &bf)).admin(t,
		"WhoAmI", &adminv1.WhoAmIRequest{}, new(adminv1.WhoAmIResponse)), codes.Unavailable)
	wantCode(t, "operator's certificate on --addr", dialTLS(t, p.addr, opsTLS(&alice)).conn.Invoke(t.Context(),
		"/bigfleet.v1alpha1.CapacityProvider/List", &pb.ListFilter{}, new(pb.MachineList)), codes.Unavailable)

	if page := get(t, "https://"+adminAddr+"/", opsTLS(&alice)); !strings.Contains(page, "<html") {
		t.Errorf("admin page:\n%.300s", page)
	}
}

// TestAdminAddrBusy: a taken --admin-addr fails the start, naming the flag.
func TestAdminAddrBusy(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	err = run(t.Context(), []string{"--use-fake-backend", "--addr=127.0.0.1:0", "--metrics-addr=",
		"--admin-addr=" + busy.Addr().String()}, io.Discard, io.Discard)
	if err == nil || !strings.HasPrefix(err.Error(), "--admin-addr "+busy.Addr().String()) {
		t.Errorf("run = %v; want an error naming --admin-addr", err)
	}
}

// get fetches url (over TLS with cfg when given) and returns the body.
func get(t *testing.T, url string, cfg *tls.Config) string {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, res.Status, b)
	}
	return string(b)
}
