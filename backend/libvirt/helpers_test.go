package libvirt

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// syncBuffer is a log sink safe for the background connection loops.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// nodeURI is a private test-driver world: every connection to a file URI
// gets its own copy of testdata/node.xml, so tests do not share state.
func nodeURI(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs("testdata/node.xml")
	if err != nil {
		t.Fatal(err)
	}
	return "test://" + p
}

func testConfig(t testing.TB) Config {
	return Config{
		Hosts:            []Host{{Zone: "z1", URI: nodeURI(t)}},
		Provider:         "prov-" + meta.Sanitize(t.Name(), 40),
		Image:            "golden.qcow2",
		Pool:             "bigfleet",
		Network:          "default",
		Kernel:           "/boot/vmlinuz-test",
		Initrd:           "/boot/initrd-test",
		Cmdline:          "console=ttyS0 panic=-1",
		Bootstrap:        guestAgentFast(),
		AgentTimeout:     time.Second,
		InventoryTimeout: 5 * time.Second,
		ReconnectMin:     10 * time.Millisecond,
		ReconnectMax:     50 * time.Millisecond,
	}
}

// newTestBackend opens a backend on a private test-driver world; mutate may
// adjust the config first. Logs go to the returned buffer as JSON.
func newTestBackend(t testing.TB, mutate func(*Config)) (*Backend, *syncBuffer) {
	t.Helper()
	cfg := testConfig(t)
	if mutate != nil {
		mutate(&cfg)
	}
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	awaitStarted(t, b)
	return b, logs
}

// awaitStarted waits for every host's first connection attempt, as the
// tests expect a reachable host connected when they begin.
func awaitStarted(t testing.TB, b *Backend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !b.AwaitFirstAttempts(ctx) {
		t.Fatal("hosts still on their first connection attempt after 10s")
	}
}

// conn returns a referenced connection of zone for direct inspection.
func testConn(t testing.TB, b *Backend, zone string) *libvirt.Connect {
	t.Helper()
	h, err := b.loc.host(zone)
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.Acquire()
	if err != nil {
		t.Fatalf("acquire %s: %v", zone, err)
	}
	t.Cleanup(func() { h.Release(c) })
	return rawConn(c)
}

// rawConn is the libvirt connection under c (and under any fault wrapper):
// tests inspect the host through it, never through injected faults.
func rawConn(c virt.Conn) *libvirt.Connect {
	if fc, ok := c.(*faultConn); ok {
		return rawConn(fc.inner)
	}
	if inner := hostconn.Unwrap(c); inner != c {
		return rawConn(inner) // the call bounds' wrapper
	}
	if raw := virt.Libvirt(c); raw != nil {
		return raw
	}
	panic("rawConn: unknown connection type")
}

// lvc and lvp adapt raw handles for the backend's helpers.
func lvc(c *libvirt.Connect) virt.Conn     { return virt.Wrap(c) }
func lvp(p *libvirt.StoragePool) virt.Pool { return virt.WrapPool(p) }

func spec(id string) backend.MachineSpec {
	return backend.MachineSpec{MachineID: id, OperationID: "op-" + id, Zone: "z1", InstanceType: "small", VCPU: 2, MemoryMiB: 256}
}

func mustCreate(t testing.TB, b *Backend, id string) backend.Placement {
	t.Helper()
	pl, err := b.Create(context.Background(), spec(id))
	if err != nil {
		t.Fatalf("Create(%s): %v", id, err)
	}
	return pl
}

func domainXML(t testing.TB, c *libvirt.Connect, name string) *libvirtxml.Domain {
	t.Helper()
	dom, err := c.LookupDomainByName(name)
	if err != nil {
		t.Fatalf("lookup %s: %v", name, err)
	}
	defer dom.Free()
	s, err := dom.GetXMLDesc(0)
	if err != nil {
		t.Fatal(err)
	}
	var x libvirtxml.Domain
	if err := x.Unmarshal(s); err != nil {
		t.Fatal(err)
	}
	return &x
}

func volumeExists(t testing.TB, c *libvirt.Connect, pool, name string) bool {
	t.Helper()
	p, err := c.LookupStoragePoolByName(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	v, err := p.LookupStorageVolByName(name)
	if isNoVolume(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	v.Free()
	return true
}

func domainExists(t testing.TB, c *libvirt.Connect, name string) bool {
	t.Helper()
	d, err := c.LookupDomainByName(name)
	if isNoDomain(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	d.Free()
	return true
}

func contains(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// guestAgentFast keeps agent waits short: the test driver has no agent.
func guestAgentFast() guestagent.BootstrapConfig {
	return guestagent.BootstrapConfig{AgentWait: 300 * time.Millisecond, DrainMargin: 2 * time.Second}
}
