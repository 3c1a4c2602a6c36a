package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// wireCaller is one client stack BigFleet's callers use: grpc-go (the
// shards), Connect JSON (curl), gRPC-Web (browser tools).
type wireCaller func(ctx context.Context, method string, req proto.Message) connect.Code

func grpcCaller(c client) wireCaller {
	return func(ctx context.Context, method string, req proto.Message) connect.Code {
		out := responseFor(method)
		return connect.Code(status.Code(c.conn.Invoke(ctx, "/bigfleet.v1alpha1.CapacityProvider/"+method, req, out)))
	}
}

func connectCaller(t *testing.T, addr string, cfg *tls.Config, opt connect.ClientOption) wireCaller {
	tr := &http.Transport{TLSClientConfig: cfg}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	c := bigfleetv1alpha1connect.NewCapacityProviderClient(&http.Client{Transport: tr}, "https://"+addr, opt)
	return func(ctx context.Context, method string, req proto.Message) connect.Code {
		var err error
		switch r := req.(type) {
		case *pb.CreateRequest:
			_, err = c.Create(ctx, connect.NewRequest(r))
		case *pb.ConfigureRequest:
			_, err = c.Configure(ctx, connect.NewRequest(r))
		case *pb.DrainRequest:
			_, err = c.Drain(ctx, connect.NewRequest(r))
		case *pb.DeleteRequest:
			_, err = c.Delete(ctx, connect.NewRequest(r))
		case *pb.MachineRef:
			_, err = c.Get(ctx, connect.NewRequest(r))
		case *pb.ListFilter:
			_, err = c.List(ctx, connect.NewRequest(r))
		}
		if err == nil {
			return 0
		}
		return connect.CodeOf(err)
	}
}

func responseFor(method string) proto.Message {
	switch method {
	case "Get":
		return new(pb.Machine)
	case "List":
		return new(pb.MachineList)
	}
	return new(pb.TransitionAck)
}

// requestFor is method's request for machine id with shard's token.
func requestFor(method, id, shard string, epoch, seq int64) proto.Message {
	switch method {
	case "Create":
		return &pb.CreateRequest{MachineId: id, ShardId: shard, ShardEpoch: epoch, SequenceNumber: seq}
	case "Configure":
		return &pb.ConfigureRequest{MachineId: id, ClusterId: "c1", BootstrapBlob: []byte("secret-blob"), ShardId: shard, ShardEpoch: epoch, SequenceNumber: seq}
	case "Drain":
		return &pb.DrainRequest{MachineId: id, ShardId: shard, ShardEpoch: epoch, SequenceNumber: seq}
	case "Delete":
		return &pb.DeleteRequest{MachineId: id, ShardId: shard, ShardEpoch: epoch, SequenceNumber: seq}
	case "Get":
		return &pb.MachineRef{Id: id}
	}
	return &pb.ListFilter{}
}

var rpcMethods = []string{"Create", "Configure", "Drain", "Delete", "Get", "List"}

func isRead(method string) bool { return method == "Get" || method == "List" }

// TestCallerIdentityOverTheWire is issue 29's table: each certificate ×
// each RPC × each client stack, with the code BigFleet's ADR-0048 and
// ADR-0060 fix. Every refused mutation is aimed at a real machine with a
// far newer token than its shard's mark, and must change nothing: not
// the machine, not a mark, not the store's revision.
func TestCallerIdentityOverTheWire(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "bigfleet-ca")
	srv := ca.issue(t, "server")
	certs := map[string]leaf{
		"shard s1":                 ca.issue(t, "s1", "shard-s1.bigfleet.svc", "bigfleet://shard/s1"),
		"shard s2":                 ca.issue(t, "s2", "shard-s2.bigfleet.svc", "bigfleet://shard/s2"),
		"readonly":                 ca.issue(t, "dash", "bigfleet://readonly"),
		"admin":                    ca.issue(t, "ctl", "bigfleet://admin"),
		"no bigfleet SAN":          ca.issue(t, "plain", "plain.bigfleet.svc"),
		"two bigfleet SANs":        ca.issue(t, "two", "bigfleet://shard/s1", "bigfleet://admin"),
		"DNS SAN spelling the URI": ca.issue(t, "spoof", "dns:BIGFLEET://ADMIN", "dns:bigfleet://shard/s1"),
	}
	p := startProvider(t, "--use-fake-backend", "--seed-count=3", "--metrics-addr=127.0.0.1:0",
		"--state="+t.TempDir()+"/state.db",
		"--tls-cert="+srv.certFile, "--tls-key="+srv.keyFile, "--tls-ca="+ca.file)
	if s := p.logLines("serving"); len(s) != 1 || !strings.HasPrefix(s[0]["caller_identity"].(string), "bigfleet") {
		t.Fatalf("serving log = %v; want caller_identity bigfleet", s)
	}
	s1 := dialTLS(t, p.addr, clientTLS(ca, ptr(certs["shard s1"])))
	admin := dialTLS(t, p.addr, clientTLS(ca, ptr(certs["admin"])))
	ids := []string{}
	for _, m := range s1.list(t).GetMachines() {
		ids = append(ids, m.GetId())
	}
	// s1 owns ids[0] (IDLE, mark (5,1)); ids[1] is CONFIGURED for s1.
	s1.call(t, "Create", &pb.CreateRequest{MachineId: ids[0], ShardId: "s1", ShardEpoch: 5, SequenceNumber: 1})
	s1.waitState(t, ids[0], pb.MachineState_MACHINE_STATE_IDLE)
	s1.call(t, "Create", &pb.CreateRequest{MachineId: ids[1], ShardId: "s1", ShardEpoch: 5, SequenceNumber: 1})
	s1.waitState(t, ids[1], pb.MachineState_MACHINE_STATE_IDLE)
	s1.call(t, "Configure", &pb.ConfigureRequest{MachineId: ids[1], ClusterId: "c1", ShardId: "s1", ShardEpoch: 5, SequenceNumber: 2})
	s1.waitState(t, ids[1], pb.MachineState_MACHINE_STATE_CONFIGURED)

	before := snapshot(t, s1, admin)
	type row struct {
		cert  string
		shard string // the request's shard_id
		want  func(method string) connect.Code
	}
	denied := func(string) connect.Code { return connect.CodePermissionDenied }
	readsOnly := func(m string) connect.Code {
		if isRead(m) {
			return 0
		}
		return connect.CodePermissionDenied
	}
	rows := []row{
		// The shard's own id passes identity and the fence: an unknown id
		// is NotFound (after the fence, which recorded nothing durable).
		{"shard s1", "s1", func(m string) connect.Code {
			if isRead(m) {
				return 0
			}
			return connect.CodeNotFound
		}},
		{"shard s2", "s1", readsOnly}, // another shard's id
		{"readonly", "s1", readsOnly},
		{"admin", "s1", readsOnly},
		{"no bigfleet SAN", "s1", denied},
		{"two bigfleet SANs", "s1", denied},
		{"DNS SAN spelling the URI", "s1", denied},
		{"shard s1", "", readsOnly}, // empty shard_id: no token
	}
	var table strings.Builder
	fmt.Fprintf(&table, "| certificate | request shard_id | client | %s |\n", strings.Join(rpcMethods, " | "))
	refusedMutations := 0
	for _, r := range rows {
		cfg := clientTLS(ca, ptr(certs[r.cert]))
		callers := map[string]wireCaller{
			"grpc-go":      grpcCaller(dialTLS(t, p.addr, cfg)),
			"connect-json": connectCaller(t, p.addr, cfg, connect.WithProtoJSON()),
			"grpc-web":     connectCaller(t, p.addr, cfg, connect.WithGRPCWeb()),
		}
		for _, name := range []string{"grpc-go", "connect-json", "grpc-web"} {
			codes := []string{}
			for _, m := range rpcMethods {
				target := ids[1] // CONFIGURED: Drain would be accepted
				if m == "Create" {
					target = ids[2] // SPECULATIVE: Create would be accepted
				} else if m == "Delete" || m == "Configure" {
					target = ids[0] // IDLE
				}
				want := r.want(m)
				if want == connect.CodeNotFound {
					target = "no-such-machine-" + name + "-" + m
				}
				got := callers[name](t.Context(), m, requestFor(m, target, r.shard, 1000, 0))
				if got != want {
					t.Errorf("%s, shard_id %q, %s, %s: code %v; want %v", r.cert, r.shard, name, m, got, want)
				}
				if got == connect.CodePermissionDenied && !isRead(m) {
					refusedMutations++
				}
				codes = append(codes, codeName(got))
			}
			fmt.Fprintf(&table, "| %s | %q | %s | %s |\n", r.cert, r.shard, name, strings.Join(codes, " | "))
		}
	}
	t.Logf("codes over the wire:\n%s", table.String())
	if after := snapshot(t, s1, admin); after != before {
		t.Errorf("refused calls changed the provider:\nbefore %s\nafter  %s", before, after)
	}

	// s1's own next call at its true epoch is not fenced by any of that.
	s1.call(t, "Drain", &pb.DrainRequest{MachineId: ids[1], ShardId: "s1", ShardEpoch: 5, SequenceNumber: 3})
	s1.waitState(t, ids[1], pb.MachineState_MACHINE_STATE_IDLE)
	s1.call(t, "Delete", &pb.DeleteRequest{MachineId: ids[0], ShardId: "s1", ShardEpoch: 5, SequenceNumber: 2})

	// Each refusal: a WARN line, the counter, the admin page's list.
	warns := p.logLines("caller identity refused")
	if len(warns) < refusedMutations || warns[0]["level"] != "WARN" {
		t.Errorf("%d refusal log lines (first %v); want at least %d WARN", len(warns), first(warns), refusedMutations)
	}
	for _, w := range warns {
		for _, secret := range []string{"secret-blob", "shard-s1.bigfleet.svc", "plain.bigfleet.svc"} {
			if strings.Contains(fmt.Sprint(w), secret) {
				t.Errorf("refusal log names %q: %v", secret, w)
			}
		}
	}
	metrics := get(t, "http://"+p.logLines("metrics server listening")[0]["metrics_addr"].(string)+"/metrics", nil)
	for _, want := range []string{
		`identity_rejected_total{method="Delete",reason="shard_mismatch"} 3`,
		`identity_rejected_total{method="Create",reason="role_may_not_mutate"} 6`,
		`identity_rejected_total{method="Get",reason="several_bigfleet_sans"} 3`,
		`identity_rejected_total{method="List",reason="no_bigfleet_san"} 6`, // no SAN and the DNS spelling
		`identity_rejected_total{method="Configure",reason="empty_shard_id"} 3`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	refusals := new(adminv1.ListIdentityRefusalsResponse)
	if err := admin.admin(t, "ListIdentityRefusals", &adminv1.ListIdentityRefusalsRequest{}, refusals); err != nil {
		t.Fatal(err)
	}
	if refusals.GetMode() != "bigfleet" || len(refusals.GetRefusals()) == 0 ||
		refusals.GetRefusals()[0].GetReason() != "empty_shard_id" {
		t.Errorf("ListIdentityRefusals = mode %q, %d refusals, newest %v", refusals.GetMode(), len(refusals.GetRefusals()), first(refusals.GetRefusals()))
	}
}

// snapshot is what a refused call must not change: every machine as Get
// sees it, the fence marks, and the store's revision (a List since the
// cursor taken now is empty unless a record was committed).
func snapshot(t *testing.T, c, admin client) string {
	t.Helper()
	list := c.list(t)
	marks := new(adminv1.ListFenceMarksResponse)
	if err := admin.admin(t, "ListFenceMarks", &adminv1.ListFenceMarksRequest{}, marks); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, m := range list.GetMachines() {
		fmt.Fprintf(&b, "%s=%s/%s ", m.GetId(), m.GetState(), m.GetCluster())
	}
	for _, s := range marks.GetShards() {
		for _, m := range s.GetMarks() {
			fmt.Fprintf(&b, "mark(%s,%s)=(%d,%d) ", s.GetShardId(), m.GetMachineId(), m.GetEpoch(), m.GetSequence())
		}
	}
	fmt.Fprintf(&b, "revision=%s", list.GetRevision())
	return b.String()
}

func codeName(c connect.Code) string {
	if c == 0 {
		return "OK"
	}
	return c.String()
}

func first[T any](s []T) any {
	if len(s) == 0 {
		return nil
	}
	return s[0]
}

func ptr[T any](v T) *T { return &v }

// TestNoCertificateFencesAnotherShard is the property of issue 29: for
// any sequence of calls from any set of certificates, with any shard_id
// and token, a shard's own next call at its true epoch is never fenced by
// another certificate's calls. Random sequences, over the wire, against
// the real engine and store; each seed is reported on failure.
func TestNoCertificateFencesAnotherShard(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "bigfleet-ca")
	srv := ca.issue(t, "server")
	shards := []string{"s1", "s2", "s3"}
	var callers []client
	names := []string{}
	p := startProvider(t, "--use-fake-backend", "--seed-count=4", "--metrics-addr=",
		"--tls-cert="+srv.certFile, "--tls-key="+srv.keyFile, "--tls-ca="+ca.file)
	for _, sans := range [][]string{
		{"bigfleet://shard/s1"}, {"bigfleet://shard/s2"}, {"bigfleet://shard/s3"}, {"bigfleet://readonly"},
		{"bigfleet://admin"}, {"none.bigfleet.svc"}, {"bigfleet://shard/s1", "bigfleet://shard/s2"}, {"dns:bigfleet://shard/s1"},
	} {
		callers = append(callers, dialTLS(t, p.addr, clientTLS(ca, ptr(ca.issue(t, "c", sans...)))))
		names = append(names, strings.Join(sans, "+"))
	}
	ids := []string{}
	for _, m := range callers[0].list(t).GetMachines() {
		ids = append(ids, m.GetId())
	}
	// truth is each shard's own token, advanced only by its own calls.
	truth := map[string][2]int64{"s1": {3, 0}, "s2": {7, 0}, "s3": {1, 0}}
	epochs := []int64{-1, 0, 1, 3, 7, 1 << 40, math.MaxInt64}
	methods := []string{"Create", "Configure", "Drain", "Delete"}
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 29))
		for step := range 150 {
			m, id := methods[rng.IntN(len(methods))], ids[rng.IntN(len(ids))]
			if rng.IntN(3) == 0 { // a shard's own call at its true token
				i := rng.IntN(len(shards))
				tok := truth[shards[i]]
				tok[1]++
				truth[shards[i]] = tok
				code := grpcCaller(callers[i])(t.Context(), m, requestFor(m, id, shards[i], tok[0], tok[1]))
				if code == connect.CodeFailedPrecondition || code == connect.CodePermissionDenied {
					t.Fatalf("seed %d step %d: %s's own %s on %s at its true token %v: %v", seed, step, shards[i], m, id, tok, code)
				}
				continue
			}
			// Anyone else, claiming any shard with any token.
			c := rng.IntN(len(callers))
			claim := append([]string{""}, shards...)[rng.IntN(len(shards)+1)]
			e, q := epochs[rng.IntN(len(epochs))], epochs[rng.IntN(len(epochs))]
			if c < len(shards) && shards[c] == claim {
				continue // a shard's own calls are the truth above
			}
			if code := grpcCaller(callers[c])(t.Context(), m, requestFor(m, id, claim, e, q)); code != connect.CodePermissionDenied {
				t.Fatalf("seed %d step %d: %s claiming %q: %s = %v; want PermissionDenied", seed, step, names[c], claim, m, code)
			}
		}
	}
}

// TestAdminWritesDefaultToBigFleetAdmin: with --admin-write and no
// --admin-clients, BigFleet's admin identity (a URI SAN) may write; a
// shard, a DNS SAN spelling the URI and a CN spelling it may not.
func TestAdminWritesDefaultToBigFleetAdmin(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "bigfleet-ca")
	srv := ca.issue(t, "server")
	p := startProvider(t, "--use-fake-backend", "--seed-count=1", "--metrics-addr=",
		"--tls-cert="+srv.certFile, "--tls-key="+srv.keyFile, "--tls-ca="+ca.file, "--admin-write")
	if s := p.logLines("serving"); len(s) != 1 || s[0]["admin_clients"] != "uri:bigfleet://admin" {
		t.Errorf("serving log = %v; want admin_clients uri:bigfleet://admin", s)
	}
	reconcile := func(l leaf) error {
		return dialTLS(t, p.addr, clientTLS(ca, &l)).admin(t, "TriggerReconcile",
			&adminv1.TriggerReconcileRequest{}, new(adminv1.TriggerReconcileResponse))
	}
	if err := reconcile(ca.issue(t, "ctl", "bigfleet://admin")); err != nil {
		t.Errorf("bigfleet://admin: %v", err)
	}
	for name, l := range map[string]leaf{
		"shard":               ca.issue(t, "s1", "bigfleet://shard/s1"),
		"readonly":            ca.issue(t, "dash", "bigfleet://readonly"),
		"DNS SAN spelling it": ca.issue(t, "spoof", "dns:bigfleet://admin"),
		"upper-case DNS SAN":  ca.issue(t, "spoof", "dns:BIGFLEET://ADMIN"),
	} {
		if code := status.Code(reconcile(l)); code != codes.PermissionDenied {
			t.Errorf("%s: %v; want PermissionDenied", name, code)
		}
	}
}
