//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt"
)

// TestLifecycle: Create boots a VM that answers guest-ping, a failing
// bootstrap leaves no binding, Configure delivers a 1 MiB binary blob byte
// for byte, Drain clears the binding, Delete leaves nothing — all while a
// second host that does not answer sits in the same backend.
func TestLifecycle(t *testing.T) {
	e := loadEnv(t)
	b := newBackend(t, e, "it-lifecycle",
		libvirt.Host{Zone: "dead", URI: "qemu+unix:///system?socket=/nonexistent/libvirt-sock"})
	if err := b.ZoneReady("dead"); !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("dead host ready: %v", err)
	}
	if err := b.ZoneReady("local"); err != nil {
		t.Fatalf("local host not ready next to a dead one: %v", err)
	}
	id := uniq("life")
	pl, created, boot := createGuest(t, b, id)
	t.Logf("TIMING create (overlay+define+start+running): %s; start → first guest-ping: %s", created, boot)
	if !strings.Contains(virsh(t, e, "vol-list", e.Pool), pl.Domain+".qcow2") {
		t.Fatal("overlay volume missing")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	// Bootstrap exit 3 → an error carrying status 3, and no binding.
	err := b.Configure(ctx, backend.ConfigureSpec{MachineID: id, OperationID: "op-x", Placement: pl,
		ClusterID: "exit3", BootstrapBlob: []byte("x")})
	var he *guestagent.HookError
	if !errors.As(err, &he) || he.Result.ExitCode != 3 || !strings.Contains(err.Error(), "bootstrap failed on purpose") {
		t.Fatalf("exit3: %v", err)
	}
	if cl := observed(t, b, id).ClusterID; cl != "" {
		t.Fatalf("failed configure left binding %q", cl)
	}

	// 1 MiB with NUL bytes, delivered byte for byte.
	blob := bytes.Repeat([]byte{0, 1, 2, 0xff, 'b', 'f', 0, '\n'}, 128<<10)
	meta := map[string]string{"shard": "s-1", "note": "ünïcödé\x01"}
	t0 := time.Now()
	err = b.Configure(ctx, backend.ConfigureSpec{MachineID: id, OperationID: "op-cfg", Placement: pl,
		ClusterID: "cluster-a", BootstrapBlob: blob, ShardMetadata: meta})
	if err != nil {
		t.Fatalf("Configure: %v", err)
	}
	t.Logf("TIMING configure with a 1 MiB blob: %s", time.Since(t0))
	if got := guestCat(t, b, pl, "/run/bigfleet/blob.sha256"); got != sha(blob) {
		t.Fatalf("blob sha256 in guest %s, want %s", got, sha(blob))
	}
	if got := guestCat(t, b, pl, "/run/bigfleet/cluster"); got != "cluster-a" {
		t.Fatalf("hook saw cluster %q", got)
	}
	o := observed(t, b, id)
	if o.ClusterID != "cluster-a" || o.ShardMetadata["note"] != meta["note"] || !o.Running {
		t.Fatalf("binding after configure: %+v", o)
	}

	t0 = time.Now()
	if err := b.Drain(ctx, backend.DrainSpec{MachineID: id, OperationID: "op-drain", Placement: pl,
		ClusterID: "cluster-a", Grace: 5 * time.Second}); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	t.Logf("TIMING drain: %s", time.Since(t0))
	if got := guestCat(t, b, pl, "/run/bigfleet/drained"); got != "drained" {
		t.Fatalf("drain hook did not run: %q", got)
	}
	if o := observed(t, b, id); o.ClusterID != "" || o.ShardMetadata != nil {
		t.Fatalf("binding after drain: %+v", o)
	}

	latency(t, b, pl, id)

	t0 = time.Now()
	if err := b.Delete(ctx, backend.DeleteSpec{MachineID: id, OperationID: "op-del", Zone: "local", Placement: pl}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	t.Logf("TIMING delete: %s", time.Since(t0))
	if strings.Contains(virsh(t, e, "list", "--all", "--name"), pl.Domain) {
		t.Fatal("domain left after Delete")
	}
	vols := virsh(t, e, "vol-list", e.Pool)
	if strings.Contains(vols, pl.Domain) || !strings.Contains(vols, e.Image) {
		t.Fatalf("volumes after Delete:\n%s", vols)
	}
	if _, found := find(b, id); found {
		t.Fatal("Inventory still lists the deleted machine")
	}
	for _, zi := range b.Inventory(ctx) {
		if zi.Zone == "dead" && !errors.Is(zi.Err, backend.ErrHostUnavailable) {
			t.Fatalf("dead zone inventory: %+v", zi)
		}
	}
}

// latency measures Configure/Drain cycles with a tiny blob (the hooks do
// next to nothing) against raw agent round trips on the same guest.
func latency(t *testing.T, b *libvirt.Backend, pl backend.Placement, id string) {
	const cycles = 20
	ctx := t.Context()
	c, _ := b.AgentClient(pl)
	var ping, exec, seq, cfg, drain []time.Duration
	for i := range cycles {
		t0 := time.Now()
		if err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		ping = append(ping, time.Since(t0))
		t0 = time.Now()
		if res, err := c.RunHook(ctx, []string{"/bin/true"}, 10*time.Second); err != nil || !res.OK() {
			t.Fatalf("exec /bin/true: %v %+v", err, res)
		}
		exec = append(exec, time.Since(t0))
		t0 = time.Now()
		rawBootstrap(t, c, byte(i))
		seq = append(seq, time.Since(t0))
		t0 = time.Now()
		if err := b.Configure(ctx, backend.ConfigureSpec{MachineID: id, OperationID: "op-c", Placement: pl,
			ClusterID: "cluster-l", BootstrapBlob: []byte{byte(i), 0, 1}}); err != nil {
			t.Fatalf("cycle %d configure: %v", i, err)
		}
		cfg = append(cfg, time.Since(t0))
		t0 = time.Now()
		if err := b.Drain(ctx, backend.DrainSpec{MachineID: id, OperationID: "op-d", Placement: pl,
			ClusterID: "cluster-l", Grace: time.Second}); err != nil {
			t.Fatalf("cycle %d drain: %v", i, err)
		}
		drain = append(drain, time.Since(t0))
	}
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"raw guest-ping", ping}, {"raw guest-exec /bin/true + status", exec},
		{"raw bootstrap sequence (ping, write, bootstrap, probe, ready)", seq}, {"Configure", cfg}, {"Drain", drain}} {
		med, p95 := stats(m.d)
		t.Logf("TIMING %s over %d: median %s p95 %s", m.name, cycles, med.Round(100*time.Microsecond), p95.Round(100*time.Microsecond))
	}
}

// rawBootstrap is the agent work of one Configure done by hand with the
// same client, so Configure minus this is what the provider itself adds
// (ownership check, metadata read and write, handle lookups).
func rawBootstrap(t *testing.T, c *guestagent.Client, n byte) {
	ctx := t.Context()
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, guestagent.DefaultBlobPath, []byte{n, 0, 1}, 0); err != nil {
		t.Fatal(err)
	}
	for _, hook := range []string{guestagent.DefaultBootstrapHook, guestagent.DefaultReadyHook} {
		if hook == guestagent.DefaultReadyHook {
			h, err := c.FileOpen(ctx, hook, "r")
			if err != nil {
				t.Fatal(err)
			}
			_ = c.FileClose(ctx, h)
		}
		if res, err := c.RunHook(ctx, []string{hook, "cluster-l"}, 10*time.Second); err != nil || !res.OK() {
			t.Fatalf("%s: %v %+v", hook, err, res)
		}
	}
}

func find(b *libvirt.Backend, id string) (backend.Observed, bool) {
	for _, zi := range b.Inventory(context.Background()) {
		for _, o := range zi.Machines {
			if o.MachineID == id {
				return o, true
			}
		}
	}
	return backend.Observed{}, false
}

func observed(t *testing.T, b *libvirt.Backend, id string) backend.Observed {
	t.Helper()
	o, ok := find(b, id)
	if !ok {
		t.Fatalf("Inventory does not list %s", id)
	}
	return o
}
