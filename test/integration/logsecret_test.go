//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// agentFilter is what deploy/host-setup/libvirtd-*.conf put first in
// log_filters: neither libvirt's agent module nor its public QEMU API
// entry (which logs each call's arguments, the agent command among them)
// logs below warning.
const agentFilter = "3:qemu.qemu_agent 3:libvirt-qemu 3:util.json"

// TestBlobNeverInLibvirtLogs runs a real libvirtd with debug logging on for
// the qemu driver and the RPC layer, and delivers a blob through the guest
// agent twice: once without the agent filter, where libvirt writes the
// guest-file-write payload to its log (the control: this test can see a
// leak), and once with it, where no piece of the blob may appear in any log
// under /var/log/libvirt.
func TestBlobNeverInLibvirtLogs(t *testing.T) {
	e := loadEnv(t)
	if _, err := exec.LookPath("virt-admin"); err != nil {
		t.Skip("virt-admin not installed")
	}
	restore := saveLogging(t)
	t.Cleanup(restore)
	b := newBackend(t, e, "it-logsecret")
	id := uniq("logsecret")
	pl, _, _ := createGuest(t, b, id)
	dir := "/var/log/libvirt"

	control := filepath.Join(dir, "bf-logsecret-control.log")
	blobA := randomBlob(t)
	setLogging(t, "1:qemu 1:rpc", "1:file:"+control)
	configure(t, b, pl, id, "op-a", blobA)
	restore()
	if !leaks(t, control, blobA) {
		t.Fatalf("control: with qemu.qemu_agent at debug the payload should be in %s; the test cannot see a leak", control)
	}
	_ = os.Remove(control)

	protected := filepath.Join(dir, "bf-logsecret.log")
	t.Cleanup(func() { _ = os.Remove(protected) })
	blobB := randomBlob(t)
	setLogging(t, agentFilter+" 1:qemu 1:rpc 1:util", "1:file:"+protected)
	configure(t, b, pl, id, "op-b", blobB)
	restore()
	if data, _ := os.ReadFile(protected); !bytes.Contains(data, []byte(" debug : ")) {
		t.Fatalf("%s has no debug lines: debug logging was not on", protected)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	qemuLogs, _ := filepath.Glob(filepath.Join(dir, "qemu", "*.log"))
	for _, f := range append(logs, qemuLogs...) {
		if leaks(t, f, blobB) {
			t.Errorf("%s holds a piece of the blob, in lines from %v", f, leakingFuncs(f, blobB))
		}
	}
}

func configure(t *testing.T, b interface {
	Configure(context.Context, backend.ConfigureSpec) error
}, pl backend.Placement, id, op string, blob []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := b.Configure(ctx, backend.ConfigureSpec{MachineID: id, OperationID: op, Placement: pl,
		ClusterID: "cluster-a", BootstrapBlob: blob}); err != nil {
		t.Fatalf("Configure: %v", err)
	}
}

func randomBlob(t *testing.T) []byte {
	t.Helper()
	b := make([]byte, 64<<10)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// leaks reports whether file holds the blob's first bytes in the form the
// agent carries them (base64 from the chunk start) or any 32-byte raw piece
// of its first KiB.
func leaks(t *testing.T, file string, blob []byte) bool {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	if bytes.Contains(data, []byte(base64.StdEncoding.EncodeToString(blob[:48]))) {
		return true
	}
	for i := 0; i+32 <= 1024; i += 32 {
		if bytes.Contains(data, blob[i:i+32]) {
			return true
		}
	}
	return false
}

func virtAdmin(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("virt-admin", append([]string{"-q", "-c", "libvirtd:///system"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virt-admin %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func setLogging(t *testing.T, filters, outputs string) {
	t.Helper()
	virtAdmin(t, "daemon-log-filters", filters)
	virtAdmin(t, "daemon-log-outputs", outputs)
}

// saveLogging returns a function that puts the daemon's log filters and
// outputs back as they were.
func saveLogging(t *testing.T) func() {
	t.Helper()
	value := func(out, label string) string {
		return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), label))
	}
	filters := value(virtAdmin(t, "daemon-log-filters"), "Logging filters:")
	outputs := value(virtAdmin(t, "daemon-log-outputs"), "Logging outputs:")
	return func() {
		_ = exec.Command("virt-admin", "-q", "-c", "libvirtd:///system", "daemon-log-filters", filters).Run()
		_ = exec.Command("virt-admin", "-q", "-c", "libvirtd:///system", "daemon-log-outputs", outputs).Run()
	}
}

// leakingFuncs names the functions of the debug lines that carry the blob's
// base64 ("... debug : virDomainQemuAgentCommand:123 : ..."), so a failure
// says which module's filter is missing.
func leakingFuncs(file string, blob []byte) []string {
	data, _ := os.ReadFile(file)
	needle := []byte(base64.StdEncoding.EncodeToString(blob[:48]))
	var out []string
	for _, line := range bytes.Split(data, []byte("\n")) {
		if !bytes.Contains(line, needle) {
			continue
		}
		_, rest, _ := bytes.Cut(line, []byte(" : "))
		fn, _, _ := bytes.Cut(rest, []byte(" : "))
		out = append(out, string(fn))
	}
	return out
}
