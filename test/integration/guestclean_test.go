//go:build integration

package integration

import (
	"context"
	"crypto/rand"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// The tests of issue 15 cases 6 and 7: what Configure and Drain leave in
// the guest after an interrupted transition, read from inside the real
// guest through guest-exec.

// guestListScript prints "size mode uid gid path" for every file under
// /opt/bigfleet (the hooks, the blob and anything a transition left there).
// It is a constant: the data (the directory) comes as $1.
const guestListScript = `find "$1" -type f -exec stat -c '%s %a %u %g %n' {} +`

// guestProcsScript prints "pid pgid cmdline" for every process of the
// guest, from /proc (cmdline NULs turned into spaces).
const guestProcsScript = `for d in /proc/[0-9]*; do
	c=$(tr '\000' ' ' <"$d/cmdline" 2>/dev/null) || continue
	[ -n "$c" ] || continue
	s=$(cat "$d/stat" 2>/dev/null) || continue
	s=${s##*) }
	set -- $s
	echo "${d#/proc/} $3 $c"
done`

// guestRun runs argv in the guest (no shell unless argv names one) and
// returns its stdout; it fails the test unless the run exits 0.
func guestRun(t *testing.T, b *libvirt.Backend, pl backend.Placement, argv ...string) string {
	t.Helper()
	c, err := b.AgentClient(pl)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.RunHook(t.Context(), argv, 30*time.Second)
	if err != nil || !res.OK() {
		t.Fatalf("guest-exec %q: %v %+v (stderr %q)", argv[0], err, res, res.Stderr)
	}
	return string(res.Stdout)
}

// waitAgent waits until the guest agent answers: an IDLE machine's guest
// may still be booting.
func waitAgent(t *testing.T, b *libvirt.Backend, pl backend.Placement) {
	t.Helper()
	c, err := b.AgentClient(pl)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// guestFile is one line of guestListScript.
type guestFile struct {
	Size     int
	Mode     string
	UID, GID string
	Path     string
}

func guestFiles(t *testing.T, b *libvirt.Backend, pl backend.Placement) []guestFile {
	t.Helper()
	out := guestRun(t, b, pl, "/bin/sh", "-c", guestListScript, "list", "/opt/bigfleet")
	var fs []guestFile
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(l, " ", 5)
		if len(f) != 5 {
			t.Fatalf("guest file list: bad line %q in %q", l, out)
		}
		n, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("guest file list: bad size in %q", l)
		}
		fs = append(fs, guestFile{Size: n, Mode: f[1], UID: f[2], GID: f[3], Path: f[4]})
	}
	return fs
}

// traceFile is the bootstrap trace a Configure leaves next to the blob.
var traceFile = guestagent.TracePath(guestagent.DefaultBlobPath)

// blobFiles are the files under /opt/bigfleet that are not the image's
// hooks nor the bootstrap trace (which holds no secret: an operation id,
// a pid and an exit status).
func blobFiles(fs []guestFile) []guestFile {
	var out []guestFile
	for _, f := range fs {
		switch f.Path {
		case guestagent.DefaultBootstrapHook, guestagent.DefaultReadyHook, guestagent.DefaultDrainHook, guestagent.DefaultBootedHook, traceFile:
			continue
		}
		out = append(out, f)
	}
	return out
}

// guestProcs returns the guest's processes whose command line contains any of want.
func guestProcs(t *testing.T, b *libvirt.Backend, pl backend.Placement, want ...string) []string {
	t.Helper()
	out := guestRun(t, b, pl, "/bin/sh", "-c", guestProcsScript, "procs")
	var hits []string
	for _, l := range strings.Split(out, "\n") {
		for _, w := range want {
			if strings.Contains(l, w) {
				hits = append(hits, strings.TrimSpace(l))
				break
			}
		}
	}
	return hits
}

// TestGuestCleanKillMidBlob (issue 15 cases 6 and 7, issue 41): bin/libvirt
// is SIGKILLed while it writes a 4 MiB blob and restarted on the same
// state. The interrupted Configure never started its bootstrap hook, so it
// rolls back to IDLE (the blob is never persisted; the guest shows the
// hook never ran), and the guest must hold no partial blob. A Configure run
// again on the same guest (what a retried Configure does) leaves exactly
// one file besides the hooks: the complete blob, 0600 and root-owned.
func TestGuestCleanKillMidBlob(t *testing.T) {
	e := loadEnv(t)
	const name = "it-gcblob"
	sweepAtEnd(t, e, name)
	cfg := provCfg{Name: name, State: filepath.Join(t.TempDir(), "state.db"), Slots: 1,
		Args: []string{"--configure-timeout=3m"}}
	p := startProvider(t, e, cfg)
	id := p.ids(t)[0]
	createIdle(t, p, id)
	domain := meta.DomainName(name, id)
	pl := backend.Placement{Zone: "local", Domain: domain}
	diag := newBackend(t, e, name)
	waitAgent(t, diag, pl)
	blob := make([]byte, 4<<20)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}

	p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-blob", BootstrapBlob: blob})
	t0 := time.Now()
	var partial guestFile
	for partial.Size == 0 {
		if time.Since(t0) > 2*time.Minute {
			t.Fatal("never saw the blob half-written")
		}
		for _, f := range blobFiles(guestFiles(t, diag, pl)) {
			if f.Size > 0 && f.Size < len(blob) {
				partial = f
			}
		}
	}
	p.kill(t)
	t.Logf("killed bin/libvirt %s after the Configure, with %s at %d of %d bytes (mode %s)",
		time.Since(t0).Round(time.Millisecond), partial.Path, partial.Size, len(blob), partial.Mode)

	p = startProvider(t, e, cfg)
	m, seen := p.awaitOneOf(t, id, time.Minute, stIdle)
	t.Logf("after the restart: %s %q (seen %v)", m.GetState(), m.GetLastError(), seen)
	if m.GetCluster() != "" || !strings.Contains(m.GetLastError(), "rolled back to IDLE") ||
		!strings.Contains(m.GetLastError(), "before its bootstrap hook started") {
		t.Errorf("rolled back: cluster %q last_error %q", m.GetCluster(), m.GetLastError())
	}
	if left := blobFiles(guestFiles(t, diag, pl)); len(left) != 0 {
		t.Errorf("the Configure cut by the restart rolled back but left %+v in the guest", left)
	}
	for _, f := range blobFiles(guestFiles(t, diag, pl)) {
		if f.Path == guestagent.DefaultBlobPath && f.Size != len(blob) {
			t.Errorf("after the kill: a partial blob at %s (%d of %d bytes, mode %s)", f.Path, f.Size, len(blob), f.Mode)
		}
		if f.Mode != "600" || f.UID != "0" {
			t.Errorf("after the kill: %s is mode %s uid %s, want 600 root", f.Path, f.Mode, f.UID)
		}
	}

	// The retry, straight through the backend (a Configure interrupted
	// in-process is re-run the same way).
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := diag.Configure(ctx, backend.ConfigureSpec{MachineID: id, OperationID: "op-retry", Placement: pl,
		ClusterID: "c-blob", BootstrapBlob: blob}); err != nil {
		t.Fatalf("retried Configure: %v", err)
	}
	left := blobFiles(guestFiles(t, diag, pl))
	t.Logf("after the retried Configure the guest holds %+v", left)
	if len(left) != 1 || left[0].Path != guestagent.DefaultBlobPath {
		t.Errorf("after the retried Configure: files %+v, want only %s", left, guestagent.DefaultBlobPath)
	}
	for _, f := range left {
		if f.Size != len(blob) || f.Mode != "600" || f.UID != "0" || f.GID != "0" {
			t.Errorf("blob %s: %d bytes mode %s owner %s:%s, want %d bytes 600 0:0", f.Path, f.Size, f.Mode, f.UID, f.GID, len(blob))
		}
	}
	if got := guestCat(t, diag, pl, traceFile); got != "op-retry exit 0" {
		t.Errorf("bootstrap trace %q, want %q", got, "op-retry exit 0")
	}
	if got := guestCat(t, diag, pl, "/run/bigfleet/blob.sha256"); got != sha(blob) {
		t.Errorf("the bootstrap hook read a blob with sha256 %s, want %s", got, sha(blob))
	}
	p.settle(t, id)
	assertNothingLeft(t, e, name)
}

// TestGuestCleanKillMidDrain (issue 15 cases 6 and 7): a configured guest's
// blob is 0600 root; then bin/libvirt is SIGKILLed during a Drain whose hook
// hangs in "sleep 3600" (cluster drainhang) and restarted on the same
// state. The resumed Drain escalates and ends IDLE, and afterwards no
// process of any drain hook run is left in the guest: neither the one the
// killed provider started nor the one the resumed Drain timed out.
func TestGuestCleanKillMidDrain(t *testing.T) {
	e := loadEnv(t)
	const name = "it-gcdrain"
	sweepAtEnd(t, e, name)
	cfg := provCfg{Name: name, State: filepath.Join(t.TempDir(), "state.db"), Slots: 1,
		Args: []string{"--drain-timeout=2m", "--drain-margin=4s"}}
	p := startProvider(t, e, cfg)
	id := p.ids(t)[0]
	createIdle(t, p, id)
	domain := meta.DomainName(name, id)
	pl := backend.Placement{Zone: "local", Domain: domain}
	diag := newBackend(t, e, name)
	blob := newSecretBlob(t)

	p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "drainhang", BootstrapBlob: blob.blob})
	if m, _ := p.awaitOneOf(t, id, 2*time.Minute, stConfigured, stFailed); m.GetState() != stConfigured {
		t.Fatalf("Configure: %s %q", m.GetState(), m.GetLastError())
	}
	for _, f := range blobFiles(guestFiles(t, diag, pl)) {
		t.Logf("configured guest holds %+v", f)
		if f.Path != guestagent.DefaultBlobPath || f.Size != len(blob.blob) || f.Mode != "600" || f.UID != "0" || f.GID != "0" {
			t.Errorf("configured guest: %+v, want only %s, %d bytes, mode 600, owner 0:0", f, guestagent.DefaultBlobPath, len(blob.blob))
		}
	}

	const grace = 6 * time.Second
	p.accept(t, "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: int64(grace / time.Second)})
	t0 := time.Now()
	var before []string
	for len(before) == 0 {
		if time.Since(t0) > time.Minute {
			t.Fatal("the drain hook's sleep 3600 never showed in the guest")
		}
		before = guestProcs(t, diag, pl, "sleep 3600")
	}
	p.kill(t)
	t.Logf("killed bin/libvirt during the Drain; the guest ran %q", before)

	p = startProvider(t, e, cfg)
	m, seen := p.awaitOneOf(t, id, 2*time.Minute, stIdle, stFailed)
	t.Logf("after the restart: %s %q (seen %v) in %s", m.GetState(), m.GetLastError(), seen, time.Since(t0).Round(time.Millisecond))
	if m.GetState() != stIdle {
		t.Fatalf("resumed Drain: %s %q, want IDLE", m.GetState(), m.GetLastError())
	}
	if left := guestProcs(t, diag, pl, "sleep 3600", guestagent.DefaultDrainHook); len(left) != 0 {
		t.Errorf("after the resumed Drain the guest still runs %q", left)
	}
	p.settle(t, id)
	assertNothingLeft(t, e, name)
}
