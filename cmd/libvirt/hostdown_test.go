package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// TestDeclareHostDownByBigFleetAdmin: over mTLS with real certificates
// and --admin-clients left empty, only bigfleet://admin may declare a
// host down; a shard and a dashboard are PermissionDenied and change
// nothing. The declaration is a WARN line naming host, zone, reason and
// caller, shows in ListHosts and in host_down at once, is kept beside
// --state and is back after a restart; up ends it.
func TestDeclareHostDownByBigFleetAdmin(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "ca")
	srv := ca.issue(t, "server")
	adminCert := ca.issue(t, "bigfleet-admin", "bigfleet://admin")
	shard, readonly := ca.issue(t, "shard", "bigfleet://shard/s1"), ca.issue(t, "dash", "bigfleet://readonly")
	state := filepath.Join(t.TempDir(), "state.db")
	hosts := writeHosts(t, fakeHostsDoc)
	start := func() (*provider, client) {
		p := startProvider(t, "--use-fake-backend", "--hosts="+hosts, "--seed-count=2", "--state="+state,
			"--metrics-addr=127.0.0.1:0", "--shutdown-timeout=100ms", "--reconcile-interval=0",
			"--tls-cert="+srv.certFile, "--tls-key="+srv.keyFile, "--tls-ca="+ca.file, "--admin-write")
		return p, dialTLS(t, p.addr, clientTLS(ca, &adminCert))
	}
	p, ops := start()
	metrics := "http://" + p.logLines("metrics server listening")[0]["metrics_addr"].(string) + "/metrics"
	b1 := `{host="kvm-b1",zone="zone-b"}`
	waitSeries(t, metrics, map[string]float64{"host_down" + b1: 0})

	down := &adminv1.DeclareHostDownRequest{Host: "kvm-b1", Reason: "powered off via IPMI"}
	for name, c := range map[string]client{"shard": dialTLS(t, p.addr, clientTLS(ca, &shard)),
		"readonly": dialTLS(t, p.addr, clientTLS(ca, &readonly))} {
		wantCode(t, "down by "+name, c.admin(t, "DeclareHostDown", down, new(adminv1.DeclareHostDownResponse)), codes.PermissionDenied)
	}
	if _, err := os.Stat(state + ".down.json"); !os.IsNotExist(err) {
		t.Errorf("refused declarations wrote the down file: %v", err)
	}
	wantCode(t, "down without a reason", ops.admin(t, "DeclareHostDown", &adminv1.DeclareHostDownRequest{Host: "kvm-b1"},
		new(adminv1.DeclareHostDownResponse)), codes.InvalidArgument)

	res := new(adminv1.DeclareHostDownResponse)
	if err := ops.admin(t, "DeclareHostDown", down, res); err != nil {
		t.Fatalf("down by bigfleet://admin: %v", err)
	}
	if h := res.GetHost(); h.GetState() != "down" || h.GetDown().GetBy() != "bigfleet://admin" {
		t.Errorf("answer: %v", h)
	}
	warn := p.logLines("host declared down")
	if len(warn) != 1 || warn[0]["level"] != "WARN" || warn[0]["host"] != "kvm-b1" || warn[0]["zone"] != "zone-b" ||
		warn[0]["reason"] != "powered off via IPMI" || warn[0]["by"] != "bigfleet://admin" {
		t.Errorf("declaration log = %v", warn)
	}
	waitSeries(t, metrics, map[string]float64{"host_down" + b1: 1,
		`admin_writes_total{action="down",identity="uri:bigfleet://admin",result="ok"}`:    1,
		`admin_writes_total{action="down",identity="unlisted",result="denied"}`:            2,
		`admin_writes_total{action="down",identity="uri:bigfleet://admin",result="error"}`: 1})
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}

	p, ops = start()
	if n := len(p.logLines("host declared down (persisted)")); n != 1 {
		t.Errorf("%d 'host declared down (persisted)' lines after a restart, want 1:\n%s", n, p.stderr)
	}
	metrics = "http://" + p.logLines("metrics server listening")[0]["metrics_addr"].(string) + "/metrics"
	waitSeries(t, metrics, map[string]float64{"host_down" + b1: 1})
	hs := new(adminv1.ListHostsResponse)
	if err := ops.admin(t, "ListHosts", &adminv1.ListHostsRequest{}, hs); err != nil {
		t.Fatal(err)
	}
	for _, h := range hs.GetHosts() {
		if h.GetName() == "kvm-b1" && (h.GetDown().GetReason() != "powered off via IPMI" || h.GetDown().GetBy() != "bigfleet://admin") {
			t.Errorf("after a restart kvm-b1 is %v", h)
		}
	}
	if err := ops.admin(t, "DeclareHostUp", &adminv1.DeclareHostUpRequest{Host: "kvm-b1"}, new(adminv1.DeclareHostUpResponse)); err != nil {
		t.Fatal(err)
	}
	waitSeries(t, metrics, map[string]float64{"host_down" + b1: 0})
	if up := p.logLines("host declared up"); len(up) != 1 || up[0]["level"] != "WARN" || up[0]["declared_reason"] != "powered off via IPMI" {
		t.Errorf("end of declaration log = %v", up)
	}
}

// TestDamagedDownFileStopsStart: a down file beside --state that cannot
// be parsed stops the start, naming --state and the file: serving without
// the declarations would wait on, or call, hosts the operator fenced.
func TestDamagedDownFileStopsStart(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(state+".down.json", []byte(`{"version":1,"down":[`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a start that ignores the file serves until then
	defer cancel()
	err := run(ctx, []string{"--use-fake-backend", "--addr=127.0.0.1:0", "--metrics-addr=",
		"--state=" + state}, io.Discard, io.Discard)
	if err == nil || !strings.HasPrefix(err.Error(), "--state "+state+": admin down declarations "+state+".down.json") {
		t.Errorf("run = %v; want an error naming --state and the down file", err)
	}
}
