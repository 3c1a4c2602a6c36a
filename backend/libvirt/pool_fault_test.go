package libvirt

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// A Create whose link to its host drops mid-call keeps its booking: the
// retry goes back to the same host (adopting what the cut attempt left),
// never builds a second domain on the other host of the zone.
func TestPoolCreateLinkDropKeepsHost(t *testing.T) {
	t.Parallel()
	b, f, _ := newFaultBackend(t, func(c *Config) {
		c.Hosts = []Host{
			{Zone: "z1", URI: sizedNode(t, 4, 4<<20), Name: "a", Named: true, Enforce: true},
			{Zone: "z1", URI: sizedNode(t, 4, 2<<20), Name: "b", Named: true, Enforce: true},
		}
	}, nil)
	ctx := context.Background()
	name := meta.DomainName(b.cfg.Provider, "m1")
	r := f.add(&fault{op: "dom.Create", name: name, nth: 1, kind: faultDrop})
	_, err := b.Create(ctx, sized("m1", 1, 512)) // spread: a (more memory)
	if f.hits(r) != 1 || !backend.IsTransient(err) {
		t.Fatalf("hits %d, err %v: want a transient failure", f.hits(r), err)
	}
	if h, ok := b.loc.plan.HostOf("z1", "m1"); !ok || h != "a" {
		t.Fatalf("booking after a link fault: %q %v, want kept on a", h, ok)
	}
	// While a is away the retry waits for it instead of going to b.
	if _, err := b.Create(ctx, sized("m1", 1, 512)); err != nil && !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("retry while a reconnects: %v", err)
	}
	waitFor(t, 5*time.Second, func() bool { return b.loc.hosts["a"].Ready() == nil })
	pl, err := b.Create(ctx, sized("m1", 1, 512))
	if err != nil || pl.Host != "a" {
		t.Fatalf("retry: %+v %v", pl, err)
	}
	if !domainExists(t, hostConn(t, b, "a"), name) || domainExists(t, hostConn(t, b, "b"), name) {
		t.Fatal("the machine's domain is not on a alone")
	}
	// A failure of the work itself frees the room at once.
	b.loc.hosts["a"].ForceDomainType("no-such-virt-type")
	b.loc.hosts["b"].ForceDomainType("no-such-virt-type")
	if _, err := b.Create(ctx, sized("m2", 1, 512)); err == nil || backend.IsTransient(err) {
		t.Fatalf("define on a broken host: %v", err)
	}
	if _, ok := b.loc.plan.HostOf("z1", "m2"); ok {
		t.Fatal("booking kept after a permanent failure")
	}
}
