package libvirt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// A call that changes the host, abandoned at its bound, that succeeds
// later is neither trusted nor lost: a WARN names it and the host, and
// the engine is asked for a reconcile pass (issue 31, case 4).
func TestLateSuccessAsksForReconcile(t *testing.T) {
	t.Parallel()
	b, f, logs := newFaultBackend(t, func(c *Config) { c.CallTimeout = 200 * time.Millisecond }, nil)
	pl := mustCreate(t, b, "m1")
	if err := b.loc.hosts["z1"].WithDomain(pl.Domain, func(_ virt.Conn, d virt.Domain) error { return d.Destroy() }); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	slow := f.add(&fault{op: "dom.Create", kind: faultBlock})
	err := b.Start(context.Background(), "m1", backend.Placement{Zone: "z1"})
	var ct *hostconn.CallTimeoutError
	if !errors.As(err, &ct) {
		t.Fatalf("Start on a slow host: %v, want a call timeout", err)
	}
	select {
	case <-b.ReconcileRequests():
		t.Fatal("a reconcile was asked for before the abandoned call returned")
	default:
	}
	close(slow.release)
	select {
	case <-b.ReconcileRequests():
	case <-time.After(5 * time.Second):
		t.Fatal("the abandoned Create succeeded later and no reconcile was asked for")
	}
	if l := logs.String(); !strings.Contains(l, "returned after it was abandoned") || !strings.Contains(l, `"call":"Create `) {
		t.Errorf("no WARN naming the late call:\n%s", l)
	}
}
