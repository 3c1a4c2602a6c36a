package admin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/bigfleet/libvirt-provider/backend"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
)

// poolBackend is the fake with a zone of several hosts in front: Hosts
// reports them (out of order, to check the sorting) and SetCordoned
// records cordons, as a multi-host backend does.
type poolBackend struct {
	backend.Backend
	mu    sync.Mutex
	hosts []backend.HostStatus
	calls []string // SetCordoned calls, "host=true"
	downs []string // SetDown calls, "host=true:reason"
}

func (b *poolBackend) Hosts(context.Context) []backend.HostStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.hosts)
}

func (b *poolBackend) SetCordoned(host string, on bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, fmt.Sprintf("%s=%v", host, on))
	for i := range b.hosts {
		if b.hosts[i].Name == host {
			b.hosts[i].Cordoned = on
			return nil
		}
	}
	return fmt.Errorf("pool: %q: %w", host, backend.ErrUnknownHost)
}

func (b *poolBackend) SetDown(host string, down bool, reason string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.downs = append(b.downs, fmt.Sprintf("%s=%v:%s", host, down, reason))
	for i := range b.hosts {
		if b.hosts[i].Name == host {
			b.hosts[i].Down, b.hosts[i].DownReason = down, reason
			return nil
		}
	}
	return fmt.Errorf("pool: %q: %w", host, backend.ErrUnknownHost)
}

func (b *poolBackend) downCalls() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.downs)
}

func (b *poolBackend) cordoned(host string) bool {
	for _, h := range b.Hosts(context.Background()) {
		if h.Name == host {
			return h.Cordoned
		}
	}
	return false
}

func newPool() *poolBackend {
	capa := backend.HostCapacity{VCPUs: 16, MemoryMiB: 65536, FreeMemoryMiB: 60000, PoolFreeBytes: 500 << 30,
		CPUOvercommit: 4, MemoryOvercommit: 1.5, UsedVCPUs: 6, UsedMemoryMiB: 6144, Machines: 3}
	return &poolBackend{hosts: []backend.HostStatus{
		{Name: "kvm-b1", Zone: "zone-b", URI: "qemu+ssh://root@kvm-b1/system?keyfile=/k", Connected: true},
		{Name: "kvm-a2", Zone: "zone-a", URI: "qemu+ssh://kvm-a2/system", Connected: true, Capacity: capa,
			Labels: map[string]string{"rack": "r12"}},
		{Name: "kvm-a1", Zone: "zone-a", URI: "qemu+ssh://kvm-a1/system", Connected: false, LastError: "connection refused",
			Cordoned: true},
		// A --connect host: named after its zone, capacity not enforced.
		{Name: "zone-c", Zone: "zone-c", URI: "qemu:///system", Connected: true,
			Capacity: backend.HostCapacity{VCPUs: 8, MemoryMiB: 4096, UsedVCPUs: 12, UsedMemoryMiB: 8192, Machines: 6}},
	}}
}

// hostsEngine hands the admin API a backend of its own.
type hostsEngine struct {
	*lifecycle.Engine
	be backend.Backend
}

func (e hostsEngine) Backend() backend.Backend { return e.be }

// withBackend wraps the fake the engine runs on with wrap, for the admin
// API only.
func withBackend(wrap func(backend.Backend) backend.Backend) func(*lifecycle.Engine) admin.Engine {
	return func(e *lifecycle.Engine) admin.Engine { return hostsEngine{e, wrap(e.Backend())} }
}

func startPool(t *testing.T, opts admintest.Options) (*admintest.Server, *poolBackend) {
	pool := newPool()
	opts.Wrap = withBackend(func(fb backend.Backend) backend.Backend { pool.Backend = fb; return pool })
	return admintest.Start(t, opts), pool
}

// TestListHostsCapacity: one entry per host sorted by zone then name, with
// name, labels, cordon and the capacity after overcommit.
func TestListHostsCapacity(t *testing.T) {
	t.Parallel()
	s, _ := startPool(t, admintest.Options{})
	res, err := adminClient(s, nil).ListHosts(t.Context(), connect.NewRequest(&adminv1.ListHostsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range res.Msg.GetHosts() {
		names = append(names, h.GetZone()+"/"+h.GetName())
	}
	if want := []string{"zone-a/kvm-a1", "zone-a/kvm-a2", "zone-b/kvm-b1", "zone-c/zone-c"}; !slices.Equal(names, want) {
		t.Fatalf("hosts = %v, want %v", names, want)
	}
	hs := res.Msg.GetHosts()
	want := &adminv1.HostCapacity{Vcpus: 16, CpuOvercommit: 4, VcpusPlaceable: 64, VcpusUsed: 6, VcpusAvailable: 58,
		MemoryBytes: 64 << 30, MemoryOvercommit: 1.5, MemoryPlaceableBytes: 96 << 30, MemoryUsedBytes: 6 << 30,
		MemoryAvailableBytes: 90 << 30, MemoryFreeBytes: 60000 << 20, PoolFreeBytes: 500 << 30, Machines: 3}
	if got := hs[1].GetCapacity(); !proto.Equal(got, want) {
		t.Errorf("kvm-a2 capacity = %v\nwant %v", got, want)
	}
	if hs[1].GetLabels()["rack"] != "r12" || hs[1].GetCordoned() || hs[1].GetCordon() != nil {
		t.Errorf("kvm-a2 = %v", hs[1])
	}
	// Cordoned by the hosts file: says so, with nothing the API recorded.
	if c := hs[0].GetCordon(); !hs[0].GetCordoned() || c.GetBy() != "hosts file" || c.GetSince() != nil || hs[0].GetConnected() {
		t.Errorf("kvm-a1 = %v", hs[0])
	}
	if u := hs[2].GetUri(); strings.Contains(u, "root") || strings.Contains(u, "keyfile") {
		t.Errorf("kvm-b1 uri not redacted: %q", u)
	}
	// Not enforced (overcommit 0): nothing placeable, nothing available,
	// even with more used than the host has.
	if c := hs[3].GetCapacity(); c.GetVcpusPlaceable() != 0 || c.GetVcpusAvailable() != 0 || c.GetMemoryAvailableBytes() != 0 ||
		c.GetVcpusUsed() != 12 || c.GetMemoryUsedBytes() != 8<<30 || c.GetMachines() != 6 {
		t.Errorf("zone-c capacity = %v", c)
	}
}

// TestCordonHost: gated like ReleaseMachine (denied without --admin-write,
// logged and counted), applied through the backend, NotFound for an
// unknown host, InvalidArgument without one, and the host as it is after.
func TestCordonHost(t *testing.T) {
	t.Parallel()
	ro, roPool := startPool(t, admintest.Options{})
	_, err := adminClient(ro, nil).CordonHost(t.Context(), connect.NewRequest(&adminv1.CordonHostRequest{Host: "kvm-a2"}))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = adminClient(ro, nil).UncordonHost(t.Context(), connect.NewRequest(&adminv1.UncordonHostRequest{Host: "kvm-a1"}))
	wantCode(t, err, connect.CodePermissionDenied)
	if roPool.cordoned("kvm-a2") || !roPool.cordoned("kvm-a1") || len(roPool.calls) != 0 {
		t.Errorf("a refused write changed the backend: %v", roPool.calls)
	}
	if n := writes(ro, "cordon", "denied"); n != 1 {
		t.Errorf("cordon denied = %d, want 1", n)
	}
	if logs := ro.Logs.String(); !strings.Contains(logs, "admin write refused") || !strings.Contains(logs, "host=kvm-a2") {
		t.Errorf("refusal not logged with its host:\n%s", logs)
	}

	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			s, pool := startPool(t, admintest.Options{AdminWrite: true})
			c := adminClient(s, p.opts)
			res, err := c.CordonHost(t.Context(), connect.NewRequest(&adminv1.CordonHostRequest{Host: "kvm-a2", Reason: "kernel upgrade"}))
			if err != nil {
				t.Fatal(err)
			}
			h := res.Msg.GetHost()
			if !pool.cordoned("kvm-a2") || !h.GetCordoned() || h.GetName() != "kvm-a2" ||
				h.GetCordon().GetBy() != admintest.TestCaller || h.GetCordon().GetReason() != "kernel upgrade" || h.GetCordon().GetSince() == nil {
				t.Errorf("after cordon: backend %v, host %v", pool.cordoned("kvm-a2"), h)
			}
			_, err = c.CordonHost(t.Context(), connect.NewRequest(&adminv1.CordonHostRequest{Host: "kvm-zz"}))
			wantCode(t, err, connect.CodeNotFound)
			_, err = c.UncordonHost(t.Context(), connect.NewRequest(&adminv1.UncordonHostRequest{}))
			wantCode(t, err, connect.CodeInvalidArgument)
			un, err := c.UncordonHost(t.Context(), connect.NewRequest(&adminv1.UncordonHostRequest{Host: "kvm-a2"}))
			if err != nil {
				t.Fatal(err)
			}
			if pool.cordoned("kvm-a2") || un.Msg.GetHost().GetCordoned() || un.Msg.GetHost().GetCordon() != nil {
				t.Errorf("after uncordon: backend %v, host %v", pool.cordoned("kvm-a2"), un.Msg.GetHost())
			}
			if ok, bad := writes(s, "cordon", "ok"), writes(s, "cordon", "error"); ok != 1 || bad != 1 {
				t.Errorf("cordon ok %d error %d, want 1 and 1", ok, bad)
			}
			logs := s.Logs.String()
			if !strings.Contains(logs, `msg="admin write" action=cordon host=kvm-a2`) ||
				!strings.Contains(logs, "identity="+admintest.TestCaller) || !strings.Contains(logs, `action=cordon host=kvm-zz`) {
				t.Errorf("writes not logged:\n%s", logs)
			}
		})
	}
}

// TestCordonWithoutHostMaintenance: a backend that cannot cordon says so.
func TestCordonWithoutHostMaintenance(t *testing.T) {
	t.Parallel()
	// Only the Backend interface, whatever else the fake implements.
	type plain struct{ backend.Backend }
	s := admintest.Start(t, admintest.Options{AdminWrite: true,
		Wrap: withBackend(func(b backend.Backend) backend.Backend { return plain{b} })})
	_, err := adminClient(s, nil).CordonHost(t.Context(), connect.NewRequest(&adminv1.CordonHostRequest{Host: "zone-a"}))
	wantCode(t, err, connect.CodeUnimplemented)
	if !strings.Contains(err.Error(), "host maintenance") {
		t.Errorf("error %q does not say why", err)
	}
}

// TestCordonSurvivesRestart: a cordon made through the API is in the
// cordon file and re-applied to a new backend before the service serves;
// an uncordon removes it; a damaged file stops the service.
func TestCordonSurvivesRestart(t *testing.T) {
	t.Parallel()
	file := admin.CordonFileFor(filepath.Join(t.TempDir(), "state.db"))
	if !strings.HasSuffix(file, "/state.db.cordons.json") || admin.CordonFileFor("") != "" {
		t.Fatalf("CordonFileFor: %q, and %q without --state", file, admin.CordonFileFor(""))
	}
	s1, _ := startPool(t, admintest.Options{AdminWrite: true, CordonFile: file})
	_, err := adminClient(s1, nil).CordonHost(t.Context(), connect.NewRequest(&adminv1.CordonHostRequest{Host: "kvm-b1", Reason: "disk swap"}))
	if err != nil {
		t.Fatal(err)
	}

	s2, pool2 := startPool(t, admintest.Options{AdminWrite: true, CordonFile: file})
	if !slices.Equal(pool2.calls, []string{"kvm-b1=true"}) {
		t.Fatalf("restart applied %v, want kvm-b1=true", pool2.calls)
	}
	hs, err := adminClient(s2, nil).ListHosts(t.Context(), connect.NewRequest(&adminv1.ListHostsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	b1 := hs.Msg.GetHosts()[2]
	if b1.GetName() != "kvm-b1" || b1.GetCordon().GetReason() != "disk swap" || b1.GetCordon().GetBy() != admintest.TestCaller {
		t.Errorf("after restart: %v", b1)
	}
	if _, err := adminClient(s2, nil).UncordonHost(t.Context(), connect.NewRequest(&adminv1.UncordonHostRequest{Host: "kvm-b1"})); err != nil {
		t.Fatal(err)
	}
	_, pool3 := startPool(t, admintest.Options{CordonFile: file})
	if len(pool3.calls) != 0 || pool3.cordoned("kvm-b1") {
		t.Errorf("an uncordoned host came back cordoned: %v", pool3.calls)
	}
	if left, _ := filepath.Glob(file + ".tmp-*"); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	if err := os.WriteFile(file, []byte(`{"version":1,"cordons":[{"host":`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = admin.New(admin.Options{Engine: s1.Engine, CordonFile: file})
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("a damaged cordon file: %v, want an error naming it", err)
	}
}

// TestMachinesByHost: ListMachines' hosts filter lists what is on a host
// (what must move off it), and ListHosts counts them per host. The fake
// places on the zone's only host, named after the zone.
func TestMachinesByHost(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{Machines: 6})
	for _, id := range []string{"m-000", "m-002", "m-001"} {
		create(t, s, id, "", 0, 0)
		waitState(t, s, id, pb.MachineState_MACHINE_STATE_IDLE)
	}
	c := adminClient(s, nil)
	res, err := c.ListMachines(t.Context(), connect.NewRequest(&adminv1.ListMachinesRequest{Hosts: []string{"zone-a"}}))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range res.Msg.GetMachines() {
		ids = append(ids, m.GetMachine().GetId()+"@"+m.GetHost())
	}
	if want := []string{"m-000@zone-a", "m-002@zone-a"}; !slices.Equal(ids, want) {
		t.Errorf("machines on zone-a = %v, want %v", ids, want)
	}
	hs, err := c.ListHosts(t.Context(), connect.NewRequest(&adminv1.ListHostsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs.Msg.GetHosts() {
		want := map[string]int32{"zone-a": 2, "zone-b": 1}[h.GetName()]
		if h.GetHostMachineCount() != want || h.GetMachineCount() != 3 {
			t.Errorf("%s: %d machines on it, %d in its zone; want %d and 3", h.GetName(), h.GetHostMachineCount(), h.GetMachineCount(), want)
		}
	}
}

// TestOnCordonAfterChange: the hook runs once per cordon change that took
// effect (the host gauges refresh from it), never for a refused one.
func TestOnCordonAfterChange(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	s, pool := startPool(t, admintest.Options{AdminWrite: true, OnCordon: func() { calls.Add(1) }})
	c := adminClient(s, nil)
	if _, err := c.CordonHost(t.Context(), connect.NewRequest(&adminv1.CordonHostRequest{Host: "kvm-b1"})); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 || !pool.cordoned("kvm-b1") {
		t.Fatalf("after a cordon: %d calls, cordoned %v", n, pool.cordoned("kvm-b1"))
	}
	_, err := c.CordonHost(t.Context(), connect.NewRequest(&adminv1.CordonHostRequest{Host: "no-such-host"}))
	wantCode(t, err, connect.CodeNotFound)
	if _, err := c.UncordonHost(t.Context(), connect.NewRequest(&adminv1.UncordonHostRequest{Host: "kvm-b1"})); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("after a refused cordon and an uncordon: %d calls, want 2", n)
	}
}
