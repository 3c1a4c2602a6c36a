package guest

import (
	"context"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

// A wait changes a machine's boot status only while it owns it: a newer
// wait takes it over, and the older one's end changes nothing.
func TestBootsNewerWaitOwnsTheStatus(t *testing.T) {
	t.Parallel()
	g := New(Config{})
	defer g.Close()
	old := g.boots.begin("m", "waiting for the guest agent")
	st, ok := g.Status("m")
	if !ok || st.Phase != backend.BootBooting || st.Reason != "waiting for the guest agent" {
		t.Fatalf("after begin: %+v, %v", st, ok)
	}
	since := st.Since
	newer := g.boots.begin("m", "started again by reconcile")
	if st, _ := g.Status("m"); st.Since != since {
		t.Fatalf("one boot, two waits: since moved from %v to %v", since, st.Since)
	}
	g.boots.update("m", old, backend.BootFailed, "stale")
	if st, _ := g.Status("m"); st.Phase != backend.BootBooting || st.Reason != "started again by reconcile" {
		t.Fatalf("an older wait changed the status: %+v", st)
	}
	g.boots.update("m", newer, backend.BootFailed, "kubelet failed")
	if st, _ := g.Status("m"); st.Phase != backend.BootFailed || st.Reason != "kubelet failed" {
		t.Fatalf("the owning wait's failure: %+v", st)
	}
	g.boots.update("m", newer, "", "")
	if st, ok := g.Status("m"); ok {
		t.Fatalf("cleared status still shown: %+v", st)
	}
}

// Forget ends a machine's background check and drops its status.
func TestBootsForget(t *testing.T) {
	t.Parallel()
	g := New(Config{})
	defer g.Close()
	ctx, cancel := context.WithCancel(context.Background())
	g.boots.mu.Lock()
	g.boots.watches["m"] = cancel
	g.boots.mu.Unlock()
	g.boots.begin("m", "booting")
	if !g.Watching("m") {
		t.Fatal("the watch is not seen")
	}
	g.Forget("m")
	if g.Watching("m") || ctx.Err() == nil {
		t.Fatal("Forget left the watch running")
	}
	if _, ok := g.Status("m"); ok {
		t.Fatal("Forget left the status")
	}
	var none *Guests
	none.Forget("m") // a backend built without guests (tests) forgets nothing
	none.Close()
}
