package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// hostAdmin is a provider on the fake backend's hosts of fakeHostsDoc
// with admin writes for alice.ops.test, and her client.
type hostAdmin struct {
	p   *provider
	ops client
}

// hostAdminRig holds what every start of one test shares: the
// certificates and the hosts file.
type hostAdminRig struct {
	ca    *testCA
	srv   leaf
	alice leaf
	hosts string
}

func newHostAdminRig(t *testing.T) *hostAdminRig {
	t.Helper()
	ca := newTestCA(t, "ca")
	return &hostAdminRig{ca: ca, srv: ca.issue(t, "server"), alice: ca.issue(t, "alice", "alice.ops.test"),
		hosts: writeHosts(t, fakeHostsDoc)}
}

// start runs the provider with args after the common ones.
func (r *hostAdminRig) start(t *testing.T, args ...string) hostAdmin {
	t.Helper()
	p := startProvider(t, append([]string{"--use-fake-backend", "--hosts=" + r.hosts, "--seed-count=2",
		"--metrics-addr=127.0.0.1:0", "--shutdown-timeout=100ms",
		"--tls-cert=" + r.srv.certFile, "--tls-key=" + r.srv.keyFile, "--tls-ca=" + r.ca.file,
		"--admin-write", "--admin-clients=*.ops.test"}, args...)...)
	return hostAdmin{p: p, ops: dialTLS(t, p.addr, clientTLS(r.ca, &r.alice))}
}

func (h hostAdmin) cordon(t *testing.T, host, reason string) {
	t.Helper()
	if err := h.ops.admin(t, "CordonHost", &adminv1.CordonHostRequest{Host: host, Reason: reason},
		new(adminv1.CordonHostResponse)); err != nil {
		t.Fatalf("cordon %s: %v", host, err)
	}
}

func (h hostAdmin) host(t *testing.T, name string) *adminv1.Host {
	t.Helper()
	out := new(adminv1.ListHostsResponse)
	if err := h.ops.admin(t, "ListHosts", &adminv1.ListHostsRequest{}, out); err != nil {
		t.Fatal(err)
	}
	for _, hs := range out.GetHosts() {
		if hs.GetName() == name {
			return hs
		}
	}
	t.Fatalf("no host %s in %v", name, out.GetHosts())
	return nil
}

// TestAdminCordonSurvivesRestart: a cordon made through the admin API of
// the provider is kept beside --state and is back after a restart on the
// same --state, with who made it and why; the serving log says where.
func TestAdminCordonSurvivesRestart(t *testing.T) {
	t.Parallel()
	r := newHostAdminRig(t)
	state := filepath.Join(t.TempDir(), "state.db")
	first := r.start(t, "--state="+state)
	if c := first.p.logLines("serving")[0]["cordons"]; c != state+".cordons.json" {
		t.Errorf("serving log: cordons %v, want %s", c, state+".cordons.json")
	}
	first.cordon(t, "kvm-b1", "disk swap")
	if err := first.p.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state + ".cordons.json"); err != nil {
		t.Errorf("no cordon file beside --state: %v", err)
	}

	again := r.start(t, "--state="+state)
	b1 := again.host(t, "kvm-b1")
	if !b1.GetCordoned() || b1.GetCordon().GetBy() != "alice.ops.test" || b1.GetCordon().GetReason() != "disk swap" {
		t.Errorf("after a restart kvm-b1 is %v, want cordoned by alice.ops.test for the disk swap", b1)
	}
	if n := len(again.p.logLines("host cordoned (persisted)")); n != 1 {
		t.Errorf("%d 'host cordoned (persisted)' lines, want 1:\n%s", n, again.p.stderr)
	}
}

// TestAdminCordonInMemoryWithoutState: without --state the cordons live
// in memory, and the serving log says so.
func TestAdminCordonInMemoryWithoutState(t *testing.T) {
	t.Parallel()
	h := newHostAdminRig(t).start(t)
	if c := h.p.logLines("serving")[0]["cordons"]; c != "memory (lost on exit)" {
		t.Errorf("serving log: cordons %v, want memory (lost on exit)", c)
	}
	h.cordon(t, "kvm-b1", "")
	if !h.host(t, "kvm-b1").GetCordoned() {
		t.Error("kvm-b1 not cordoned")
	}
}

// TestHostGaugesServed: /metrics carries the per-host gauges with what
// the backend reports (the fake: blocks of the hosts file), and a cordon
// through the admin API shows at once, without waiting for a reconcile
// pass (--reconcile-interval=0: the startup pass only).
func TestHostGaugesServed(t *testing.T) {
	t.Parallel()
	h := newHostAdminRig(t).start(t, "--reconcile-interval=0")
	metrics := "http://" + h.p.logLines("metrics server listening")[0]["metrics_addr"].(string) + "/metrics"
	a1 := `{host="kvm-a1",zone="zone-a"}`
	a2, b1 := `{host="kvm-a2",zone="zone-a"}`, `{host="kvm-b1",zone="zone-b"}`
	want := map[string]float64{
		"host_connected" + a1: 1, "host_cordoned" + a1: 0, "host_vcpus" + a1: 16, "host_vcpus_placeable" + a1: 16,
		"host_memory_bytes" + a1: 65536 << 20, "host_pool_free_bytes" + a1: 500 << 30,
		"host_cordoned" + a2: 1, "host_cordoned" + b1: 0,
	}
	waitSeries(t, metrics, want)
	h.cordon(t, "kvm-b1", "")
	waitSeries(t, metrics, map[string]float64{"host_cordoned" + b1: 1})
}

// waitSeries polls the metrics until every series has its value.
func waitSeries(t *testing.T, url string, want map[string]float64) {
	t.Helper()
	var got map[string]float64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got = parseSeries(get(t, url, nil))
		if matches(got, want) {
			return
		}
	}
	for s, v := range want {
		if g, ok := got[s]; !ok || g != v {
			t.Errorf("%s = %v (found %v), want %v", s, g, ok, v)
		}
	}
}

func matches(got, want map[string]float64) bool {
	for s, v := range want {
		if g, ok := got[s]; !ok || g != v {
			return false
		}
	}
	return true
}

// parseSeries reads the text exposition: series (name and labels) → value.
func parseSeries(body string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if strings.HasPrefix(line, "#") || i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// TestDamagedCordonFileStopsStart: a cordon file beside --state that
// cannot be parsed stops the start, naming --state and the file: serving
// without the cordons could place machines on a host under maintenance.
func TestDamagedCordonFileStopsStart(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(state+".cordons.json", []byte(`{"version":1,"cordons":[`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a start that ignores the file serves until then
	defer cancel()
	err := run(ctx, []string{"--use-fake-backend", "--addr=127.0.0.1:0", "--metrics-addr=",
		"--state=" + state}, io.Discard, io.Discard)
	if err == nil || !strings.HasPrefix(err.Error(), "--state "+state+": admin cordons "+state+".cordons.json") {
		t.Errorf("run = %v; want an error naming --state and the cordon file", err)
	}
}
