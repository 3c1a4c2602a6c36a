package libvirt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/guestagent/agenttest"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/guest"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// fakeAgent is agenttest's fake qemu-ga (the bootstrap exits 3 for
// cluster "exit3").
type fakeAgent = agenttest.Agent

func newFakeAgent() *fakeAgent { return agenttest.New() }

func withFakeAgent(b *Backend) *fakeAgent {
	a := newFakeAgent()
	b.guests.Transport = func(guest.Target) guestagent.Transport { return a }
	return a
}

func configureSpec(pl backend.Placement, id, cluster string, blob []byte) backend.ConfigureSpec {
	return backend.ConfigureSpec{MachineID: id, OperationID: "op-cfg-" + id, Placement: pl, ClusterID: cluster,
		BootstrapBlob: blob, ShardMetadata: map[string]string{"shard": "s1", "ctl": "a\x01b", "": ""}}
}

// A Configure cut by a restart is abandoned as the provider starts, often
// while the host is still on its first connection attempt: AbandonConfigure
// waits for that attempt and then tidies the guest, instead of failing at
// once and leaving the partial blob behind.
func TestAbandonWaitsForFirstConnect(t *testing.T) {
	t.Parallel()
	f := newFaults(t)
	cfg := testConfig(t)
	b1, err := newBackend(cfg, f.dial)
	if err != nil {
		t.Fatal(err)
	}
	awaitStarted(t, b1)
	pl := mustCreate(t, b1, "m1")
	_ = b1.Close()

	thaw := f.freezeDials() // the restarted provider's connect hangs a while
	b2, err := newBackend(cfg, f.dial)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	a := withFakeAgent(b2)
	a.Files["/opt/bigfleet/.bootstrap.blob.partial/bootstrap.blob"] = []byte("half")
	done := make(chan error, 1)
	go func() { done <- b2.AbandonConfigure(context.Background(), "m1", pl) }()
	select {
	case err := <-done:
		t.Fatalf("AbandonConfigure returned %v while the host was still connecting", err)
	case <-time.After(300 * time.Millisecond):
	}
	thaw()
	if err := <-done; err != nil {
		t.Fatalf("AbandonConfigure after the connect: %v", err)
	}
	a.Mu.Lock()
	defer a.Mu.Unlock()
	for p := range a.Files {
		if strings.Contains(p, "partial") {
			t.Fatalf("the partial blob %s is still in the guest", p)
		}
	}
}

// A host that never finishes its first attempt within the caller's
// deadline: AbandonConfigure says so, as a host error.
func TestAbandonConnectingDeadline(t *testing.T) {
	t.Parallel()
	f := newFaults(t)
	thaw := f.freezeDials()
	defer thaw()
	b, err := newBackend(testConfig(t), f.dial)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = b.AbandonConfigure(ctx, "m1", backend.Placement{Zone: "z1", Domain: meta.DomainName(testConfig(t).Provider, "m1")})
	if !errors.Is(err, backend.ErrHostConnecting) {
		t.Fatalf("AbandonConfigure on a connecting host: %v, want ErrHostConnecting", err)
	}
}
