package guest

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/guestagent/agenttest"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

const provider = "prov-guest-test"

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

// testHost is a connected host on a private test-driver world (the
// backend's testdata/node.xml): libvirt's own test driver, no daemon.
func testHost(t *testing.T) *hostconn.Host {
	t.Helper()
	p, err := filepath.Abs("../testdata/node.xml")
	if err != nil {
		t.Fatal(err)
	}
	hostconn.StartEventLoop(slog.Default())
	h := hostconn.New(hostconn.Config{Zone: "z1", Name: "z1", URI: "test://" + p, Pool: "bigfleet",
		ProbeName: "bf-test-kvm-probe", CallTimeout: 30 * time.Second, AgentTimeout: time.Second,
		MigrateTimeout: time.Minute, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
		KeepAliveSecs: 5, KeepAliveCount: 3})
	h.Start()
	t.Cleanup(h.Close)
	select {
	case <-h.FirstAttempt():
	case <-time.After(10 * time.Second):
		t.Fatal("host still on its first connection attempt after 10s")
	}
	return h
}

// defineDomain defines (and, if running, starts) a domain with md as its
// bigfleet metadata (nil: none, a stranger's).
func defineDomain(t *testing.T, h *hostconn.Host, name string, md *meta.Metadata, running bool) {
	t.Helper()
	x := &libvirtxml.Domain{Type: "test", Name: name, Memory: &libvirtxml.DomainMemory{Value: 64, Unit: "MiB"},
		OS: &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm"}}}
	if md != nil {
		s, err := md.Marshal(true)
		if err != nil {
			t.Fatal(err)
		}
		x.Metadata = &libvirtxml.DomainMetadata{XML: s}
	}
	s, err := x.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	err = h.With(func(c virt.Conn) error {
		dom, err := c.DomainDefineXML(s)
		if err != nil {
			return err
		}
		defer dom.Free()
		if running {
			return dom.Create()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func readMD(t *testing.T, h *hostconn.Host, name string) meta.Metadata {
	t.Helper()
	var md meta.Metadata
	err := h.WithDomain(name, func(_ virt.Conn, dom virt.Domain) error {
		var found bool
		var err error
		if md, found, err = meta.Read(dom); err == nil && !found {
			err = errors.New("no metadata")
		}
		return err
	})
	if err != nil {
		t.Fatalf("metadata of %s: %v", name, err)
	}
	return md
}

// ownedGuest is machine m1's running domain, ours, on a fresh host, with
// a fake agent unless agent is nil (then the real transport, which the
// test driver does not have).
func ownedGuest(t *testing.T, agent *agenttest.Agent) (*Guests, Target, *syncBuffer) {
	t.Helper()
	h := testHost(t)
	name := meta.DomainName(provider, "m1")
	defineDomain(t, h, name, &meta.Metadata{Provider: provider, MachineID: "m1"}, true)
	logs := &syncBuffer{}
	g := New(Config{Provider: provider, AgentTimeout: time.Second, Bootstrap: guestagent.BootstrapConfig{
		AgentWait: 300 * time.Millisecond, DrainMargin: 2 * time.Second}, Log: slog.New(slog.NewJSONHandler(logs, nil))})
	t.Cleanup(g.Close)
	if agent != nil {
		g.Transport = func(Target) guestagent.Transport { return agent }
	}
	return g, Target{Host: h, Zone: "z1", Domain: name, MachineID: "m1"}, logs
}

func configureSpec(id, cluster string, blob []byte) backend.ConfigureSpec {
	return backend.ConfigureSpec{MachineID: id, OperationID: "op-cfg-" + id, ClusterID: cluster,
		BootstrapBlob: blob, ShardMetadata: map[string]string{"shard": "s1", "ctl": "a\x01b", "": ""}}
}

// The binding is written only after the bootstrap hook succeeded; a
// failed Configure clears one it finds; the blob reaches the guest byte
// for byte and never the log; Drain clears the binding.
func TestConfigureRecordsBindingOnlyAfterSuccess(t *testing.T) {
	t.Parallel()
	a := agenttest.New()
	g, tg, logs := ownedGuest(t, a)
	ctx := context.Background()
	blob := append(bytes.Repeat([]byte("secret-bootstrap\x00"), 4000), 0xff)

	err := g.Configure(ctx, tg, configureSpec("m1", "exit3", blob))
	var he *guestagent.HookError
	if !errors.As(err, &he) || he.Result.ExitCode != 3 || !strings.Contains(err.Error(), "status 3") {
		t.Fatalf("err = %v, want bootstrap exit 3", err)
	}
	if md := readMD(t, tg.Host, tg.Domain); md.ClusterID != "" || md.ShardMetadata != nil {
		t.Fatalf("failed configure left a binding: %+v", md)
	}

	cs := configureSpec("m1", "c1", blob)
	if err := g.Configure(ctx, tg, cs); err != nil {
		t.Fatal(err)
	}
	a.Mu.Lock()
	delivered, cluster := a.Files["/opt/bigfleet/bootstrap.blob"], a.Cluster
	a.Mu.Unlock()
	if !bytes.Equal(delivered, blob) || cluster != "c1" {
		t.Fatal("blob not delivered byte for byte or hook did not see the cluster")
	}
	md := readMD(t, tg.Host, tg.Domain)
	if md.ClusterID != "c1" || !maps.Equal(md.ShardMetadata, cs.ShardMetadata) || md.OperationID != cs.OperationID {
		t.Fatalf("binding %+v", md)
	}
	if strings.Contains(logs.String(), "secret-bootstrap") {
		t.Fatal("blob logged")
	}

	// A failed re-configure clears the binding it finds.
	if err := g.Configure(ctx, tg, configureSpec("m1", "exit3", blob)); err == nil {
		t.Fatal("want failure")
	}
	if md := readMD(t, tg.Host, tg.Domain); md.ClusterID != "" {
		t.Fatalf("binding survived a failed configure: %+v", md)
	}

	if err := g.Configure(ctx, tg, cs); err != nil {
		t.Fatal(err)
	}
	ds := backend.DrainSpec{MachineID: "m1", OperationID: "op-drain", ClusterID: "c1", Grace: time.Second}
	if err := g.Drain(ctx, tg, ds); err != nil {
		t.Fatal(err)
	}
	if md := readMD(t, tg.Host, tg.Domain); md.ClusterID != "" || md.ShardMetadata != nil || md.OperationID != "op-drain" {
		t.Fatalf("drain left %+v", md)
	}
}

// The fence marks a Configure carries reach the domain before the
// bootstrap runs, so a Configure that then fails still leaves them.
func TestConfigureRecordsMarksFirst(t *testing.T) {
	t.Parallel()
	g, tg, _ := ownedGuest(t, agenttest.New())
	spec := configureSpec("m1", "exit3", []byte("x"))
	spec.Marks = map[string]backend.FenceMark{"s1": {Epoch: 2, Sequence: 7}}
	if err := g.Configure(context.Background(), tg, spec); err == nil {
		t.Fatal("want the bootstrap's failure")
	}
	if md := readMD(t, tg.Host, tg.Domain); !maps.Equal(md.Marks, spec.Marks) {
		t.Fatalf("marks after a failed configure: %v, want %v", md.Marks, spec.Marks)
	}
}

// A stranger's domain is never configured nor drained; a missing one is
// NotFound.
func TestConfigureOnAStrangerOrMissingDomain(t *testing.T) {
	t.Parallel()
	g, tg, _ := ownedGuest(t, agenttest.New())
	ctx := context.Background()
	stranger := tg
	stranger.MachineID, stranger.Domain = "m2", meta.DomainName(provider, "m2")
	defineDomain(t, tg.Host, stranger.Domain, nil, true)
	if err := g.Configure(ctx, stranger, configureSpec("m2", "c1", nil)); !errors.Is(err, backend.ErrNotOurs) {
		t.Fatalf("stranger: %v", err)
	}
	if err := g.Drain(ctx, stranger, backend.DrainSpec{MachineID: "m2", ClusterID: "c"}); !errors.Is(err, backend.ErrNotOurs) {
		t.Fatalf("stranger drain: %v", err)
	}
	missing := tg
	missing.MachineID, missing.Domain = "m3", meta.DomainName(provider, "m3")
	if err := g.Configure(ctx, missing, configureSpec("m3", "c1", nil)); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}

// The test driver has no guest agent: the real transport reports it and
// Configure fails without a binding.
func TestConfigureWithoutAgent(t *testing.T) {
	t.Parallel()
	g, tg, _ := ownedGuest(t, nil)
	err := g.Configure(context.Background(), tg, configureSpec("m1", "c1", []byte("x")))
	if err == nil || !strings.HasPrefix(err.Error(), "configure: ") {
		t.Fatalf("err = %v", err)
	}
	if md := readMD(t, tg.Host, tg.Domain); md.ClusterID != "" {
		t.Fatalf("binding %+v", md)
	}
}

// A Configure of a shut off domain starts it only when the engine allows
// (MayStart), checking in the same lookup that it is ours, and then binds
// it; without MayStart it fails transiently naming why and starts nothing.
func TestConfigureStartsAStoppedDomainOnlyWhenAllowed(t *testing.T) {
	t.Parallel()
	g, tg, _ := ownedGuest(t, agenttest.New())
	stopped := tg
	stopped.MachineID, stopped.Domain = "m4", meta.DomainName(provider, "m4")
	defineDomain(t, tg.Host, stopped.Domain, &meta.Metadata{Provider: provider, MachineID: "m4"}, false)
	ctx := context.Background()

	refused := configureSpec("m4", "c1", []byte("x"))
	refused.WhyNotStart = errors.Join(errors.New("waits for host b"), backend.ErrTransient)
	if err := g.Configure(ctx, stopped, refused); !errors.Is(err, backend.ErrNotRunning) || !strings.Contains(err.Error(), "waits for host b") {
		t.Fatalf("Configure without MayStart = %v, want not running, naming why", err)
	}
	if active(t, stopped) {
		t.Fatal("a Configure without MayStart started the domain")
	}
	allowed := configureSpec("m4", "c1", []byte("x"))
	allowed.MayStart = true
	if err := g.Configure(ctx, stopped, allowed); err != nil {
		t.Fatalf("Configure of a shut off domain: %v", err)
	}
	if !active(t, stopped) || readMD(t, tg.Host, stopped.Domain).ClusterID != "c1" {
		t.Fatal("after the Configure the domain is not running and bound")
	}

	// A stranger's stopped domain is never started, even when allowed.
	foreign := tg
	foreign.MachineID, foreign.Domain = "m5", meta.DomainName(provider, "m5")
	defineDomain(t, tg.Host, foreign.Domain, nil, false)
	spec := configureSpec("m5", "c1", nil)
	spec.MayStart = true
	if err := g.Configure(ctx, foreign, spec); !errors.Is(err, backend.ErrNotOurs) || active(t, foreign) {
		t.Fatalf("stranger: %v (active %v)", err, active(t, foreign))
	}
}

func active(t *testing.T, tg Target) bool {
	t.Helper()
	var on bool
	if err := tg.Host.WithDomain(tg.Domain, func(_ virt.Conn, dom virt.Domain) error {
		var err error
		on, err = dom.IsActive()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return on
}
