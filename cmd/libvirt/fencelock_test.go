package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// TestRefusedCallsLockNoShardOut is issue 39's lock-out, over the wire
// where identities are not bound (plaintext, and mTLS under
// --caller-identity=any): 10,000 calls from invented shard ids at one
// machine, each refused (Aborted: the machine's state), leave no mark and
// fill no bound, so the real shard then drives the machine through
// Create, Configure, Drain and Delete; again after a restart, and again
// after the state file is lost.
func TestRefusedCallsLockNoShardOut(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"plaintext", "any"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			state := filepath.Join(t.TempDir(), "state.db")
			args := []string{"--use-fake-backend", "--seed-count=1", "--metrics-addr=", "--state=" + state}
			var dialer func(addr string) client
			wantMode := "off (no client certificates"
			if mode == "any" {
				ca := newTestCA(t, "bigfleet-ca")
				srv := ca.issue(t, "server")
				args = append(args, "--caller-identity=any", "--tls-cert="+srv.certFile, "--tls-key="+srv.keyFile, "--tls-ca="+ca.file)
				cfg := clientTLS(ca, ptr(ca.issue(t, "anyone", "anyone.example")))
				dialer = func(addr string) client { return dialTLS(t, addr, cfg) }
				wantMode = "any ("
			} else {
				dialer = func(addr string) client { return dial(t, addr) }
			}
			start := func() (*provider, client) {
				p := startProvider(t, args...)
				if s := p.logLines("serving"); len(s) != 1 || !strings.HasPrefix(s[0]["caller_identity"].(string), wantMode) {
					t.Fatalf("serving log = %v; want caller_identity %s…", s, wantMode)
				}
				return p, dialer(p.addr)
			}
			p, c := start()
			id := c.list(t).GetMachines()[0].GetId()
			epoch := int64(1)
			for _, phase := range []string{"first start", "after a restart", "after the state file is lost"} {
				switch phase {
				case "after a restart":
					must(t, p.stop())
					p, c = start()
				case "after the state file is lost":
					must(t, p.stop())
					must(t, os.Remove(state))
					p, c = start()
				}
				inventedRefused(t, c, id, 10_000, phase)
				epoch++ // a new epoch: a first contact after the state loss, newer otherwise
				realLifecycle(t, c, id, "real-shard", epoch, phase)
			}
		})
	}
}

// inventedRefused sends n calls from fresh invented shard ids at machine
// id (SPECULATIVE: Drain and Configure are out of position; not Delete,
// which after a Delete is an accepted retry), each Aborted, and checks
// they left no mark.
func inventedRefused(t *testing.T, c client, id string, n int, phase string) {
	t.Helper()
	methods := []string{"Drain", "Configure"}
	for i := range n {
		m := methods[i%len(methods)]
		shard := fmt.Sprintf("invented-%s-%05d", strings.ReplaceAll(phase, " ", "-"), i)
		if code := grpcCaller(c)(t.Context(), m, requestFor(m, id, shard, 1, 1)); code != connect.CodeAborted {
			t.Fatalf("%s: invented shard %d's %s: %v; want Aborted (out of position)", phase, i, m, code)
		}
	}
	marks := new(adminv1.ListFenceMarksResponse)
	if err := c.admin(t, "ListFenceMarks", &adminv1.ListFenceMarksRequest{MachineId: id}, marks); err != nil {
		t.Fatal(err)
	}
	for _, s := range marks.GetShards() {
		if strings.HasPrefix(s.GetShardId(), "invented-") {
			t.Fatalf("%s: refused calls left a mark of %s", phase, s.GetShardId())
		}
	}
	if marks.GetRefusedAtLimit() != 0 {
		t.Errorf("%s: %d calls refused at the bound; want none", phase, marks.GetRefusedAtLimit())
	}
}

// realLifecycle drives machine id from SPECULATIVE through every edge
// with shard's tokens at epoch.
func realLifecycle(t *testing.T, c client, id, shard string, epoch int64, phase string) {
	t.Helper()
	steps := []struct {
		method string
		req    proto.Message
		then   pb.MachineState
	}{
		{"Create", &pb.CreateRequest{MachineId: id, ShardId: shard, ShardEpoch: epoch, SequenceNumber: 1}, pb.MachineState_MACHINE_STATE_IDLE},
		{"Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c1", BootstrapBlob: []byte("b"), ShardId: shard, ShardEpoch: epoch, SequenceNumber: 2}, pb.MachineState_MACHINE_STATE_CONFIGURED},
		{"Drain", &pb.DrainRequest{MachineId: id, ShardId: shard, ShardEpoch: epoch, SequenceNumber: 3}, pb.MachineState_MACHINE_STATE_IDLE},
		{"Delete", &pb.DeleteRequest{MachineId: id, ShardId: shard, ShardEpoch: epoch, SequenceNumber: 4}, pb.MachineState_MACHINE_STATE_SPECULATIVE},
	}
	for _, s := range steps {
		if code := grpcCaller(c)(t.Context(), s.method, s.req); code != 0 {
			t.Fatalf("%s: the real shard's %s: %v", phase, s.method, code)
		}
		c.waitState(t, id, s.then)
	}
}

// TestFenceClearOverTheWire: a machine at its shards-per-machine bound
// (filled by accepted calls, which do leave marks) refuses a new shard
// ResourceExhausted; a clear by any certificate but bigfleet://admin is
// PermissionDenied and changes nothing; bigfleet://admin's clear is
// logged, counted and in the machine's history, and the refused shard
// then acts.
func TestFenceClearOverTheWire(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "bigfleet-ca")
	srv := ca.issue(t, "server")
	p := startProvider(t, "--use-fake-backend", "--seed-count=1", "--metrics-addr=127.0.0.1:0", "--caller-identity=any",
		"--state="+filepath.Join(t.TempDir(), "state.db"),
		"--tls-cert="+srv.certFile, "--tls-key="+srv.keyFile, "--tls-ca="+ca.file, "--admin-write")
	admin := dialTLS(t, p.addr, clientTLS(ca, ptr(ca.issue(t, "ctl", "bigfleet://admin"))))
	id := admin.list(t).GetMachines()[0].GetId()
	marks := func() *adminv1.ListFenceMarksResponse {
		out := new(adminv1.ListFenceMarksResponse)
		if err := admin.admin(t, "ListFenceMarks", &adminv1.ListFenceMarksRequest{MachineId: id}, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	limit := int(marks().GetShardsPerMachineLimit())
	// Accepted calls: the first Create, then each shard's Create of the
	// IDLE machine (an idempotent retry).
	for i := range limit {
		admin.call(t, "Create", requestFor("Create", id, fmt.Sprintf("filler-%02d", i), 1, 1))
		admin.waitState(t, id, pb.MachineState_MACHINE_STATE_IDLE)
	}
	configure := requestFor("Configure", id, "late-shard", 1, 1)
	if code := grpcCaller(admin)(t.Context(), "Configure", configure); code != connect.CodeResourceExhausted {
		t.Fatalf("a new shard's Configure at the bound: %v; want ResourceExhausted", code)
	}
	before := marks()
	if b := before.GetBusiest(); len(before.GetShards()) != limit || before.GetRefusedAtLimit() != 1 ||
		len(b) != 1 || b[0].GetMachineId() != id || int(b[0].GetShards()) != limit {
		t.Errorf("at the bound: %d shards, %d refused, busiest %v; want %d, 1, %s with %d",
			len(before.GetShards()), before.GetRefusedAtLimit(), b, limit, id, limit)
	}
	clear := &adminv1.ClearFenceMarkRequest{MachineId: id, ShardId: "filler-07"}
	for name, sans := range map[string][]string{
		"readonly":                 {"bigfleet://readonly"},
		"the shard itself":         {"bigfleet://shard/filler-07"},
		"DNS SAN spelling the URI": {"dns:bigfleet://admin"},
	} {
		c := dialTLS(t, p.addr, clientTLS(ca, ptr(ca.issue(t, "x", sans...))))
		wantCode(t, "clear by "+name, c.admin(t, "ClearFenceMark", clear, new(adminv1.ClearFenceMarkResponse)), codes.PermissionDenied)
	}
	if after := marks(); !proto.Equal(before, after) {
		t.Fatalf("refused clears changed the marks:\nbefore %v\nafter  %v", before, after)
	}
	res := new(adminv1.ClearFenceMarkResponse)
	if err := admin.admin(t, "ClearFenceMark", clear, res); err != nil {
		t.Fatalf("clear by bigfleet://admin: %v", err)
	}
	if res.GetCleared().GetEpoch() != 1 || res.GetCleared().GetSequence() != 1 || int(res.GetShardsLeft()) != limit-1 {
		t.Errorf("clear = %v", res)
	}
	h := res.GetMachine().GetMachine()
	if h.GetId() != id {
		t.Errorf("clear answered machine %q", h.GetId())
	}
	hist := new(adminv1.GetMachineHistoryResponse)
	if err := admin.admin(t, "GetMachineHistory", &adminv1.GetMachineHistoryRequest{Id: id}, hist); err != nil {
		t.Fatal(err)
	}
	last := hist.GetTransitions()[len(hist.GetTransitions())-1]
	if last.GetKind() != "fence-clear" || !strings.Contains(last.GetNote(), `"filler-07"`) || !strings.Contains(last.GetNote(), "bigfleet://admin") {
		t.Errorf("last history entry = %v; want the clear, naming the shard and the operator", last)
	}
	if w := p.logLines("fence mark cleared"); len(w) != 1 || w[0]["level"] != "WARN" || w[0]["by"] != "bigfleet://admin" {
		t.Errorf("clear log = %v", w)
	}
	if code := grpcCaller(admin)(t.Context(), "Configure", configure); code != 0 {
		t.Fatalf("the refused shard's Configure after the clear: %v", code)
	}
	admin.waitState(t, id, pb.MachineState_MACHINE_STATE_CONFIGURED)
	// The same clear again: that shard holds no mark there now.
	wantCode(t, "a second clear", admin.admin(t, "ClearFenceMark", clear, new(adminv1.ClearFenceMarkResponse)), codes.NotFound)
	metrics := get(t, "http://"+p.logLines("metrics server listening")[0]["metrics_addr"].(string)+"/metrics", nil)
	for _, want := range []string{
		`admin_writes_total{action="fence-clear",identity="uri:bigfleet://admin",result="ok"} 1`,
		`admin_writes_total{action="fence-clear",identity="unlisted",result="denied"} 3`,
		"fence_shard_limit_refused_total 1",
		fmt.Sprintf("fence_shards_per_machine_limit %d", limit),
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
