package hostconn

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLastErrorLine(t *testing.T) {
	t.Parallel()
	log := strings.Join([]string{
		"2026-12-03 11:00:00.000+0000: starting up libvirt version: 9.0.0",
		"LC_ALL=C /usr/bin/qemu-system-x86_64 -name guest=bf-x -object secret,id=masterKey0,format=raw,file=/var/lib/libvirt/qemu/domain-1/master-key.aes",
		"-object {\"qom-type\":\"secret\",\"id\":\"s1\",\"data\":\"c2VjcmV0\"} -chardev socket,id=charchannel0,path=/var/lib/libvirt/qemu/channel/target/domain-1/org.qemu.guest_agent.0",
		"Could not access KVM kernel module: Permission denied",
		"qemu-system-x86_64: failed to initialize kvm: Permission denied password=hunter2",
		"2026-12-03 11:00:01.000+0000: shutting down, reason=failed",
		"",
	}, "\n")
	got := lastErrorLine([]byte(log))
	want := "qemu-system-x86_64: failed to initialize kvm: Permission denied password=REDACTED"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if got := lastErrorLine([]byte("starting up\nall fine\n")); got != "" {
		t.Fatalf("no error line: got %q", got)
	}
}

func TestRedactSecretsKeepsPaths(t *testing.T) {
	t.Parallel()
	in := "chardev socket,path=/var/lib/libvirt/qemu/channel/x.sock,data=Zm9v,key=abc failed"
	got := redactSecrets(in)
	if strings.Contains(got, "Zm9v") || strings.Contains(got, "abc") || !strings.Contains(got, "path=/var/lib/libvirt/qemu/channel/x.sock") {
		t.Fatalf("redactSecrets = %q", got)
	}
}

func TestLocalSystemURI(t *testing.T) {
	t.Parallel()
	for uri, want := range map[string]bool{
		"qemu:///system": true, "qemu+unix:///system": true, "qemu:///session": false,
		"qemu+libssh://h/system?keyfile=k": false, "qemu+tls://h/system": false, "test:///default": false,
	} {
		if got := localSystemURI(uri); got != want {
			t.Errorf("localSystemURI(%q) = %v, want %v", uri, got, want)
		}
	}
}

// TestExplainStartAddsQEMULogLine: a failed start carries the QEMU log's
// last error line (once), and only for a local host.
func TestExplainStartAddsQEMULogLine(t *testing.T) { //nolint:paralleltest // sets qemuLogDir
	dir := t.TempDir()
	old := qemuLogDir
	qemuLogDir = dir
	t.Cleanup(func() { qemuLogDir = old })
	line := "qemu-system-x86_64: -accel kvm: Could not access KVM kernel module: Permission denied"
	if err := os.WriteFile(filepath.Join(dir, "bf-p-m1-0000.log"), []byte("starting\n"+line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	local := New(Config{URI: "qemu:///system"})
	got := local.ExplainStart("bf-p-m1-0000", errors.New("internal error: process exited"))
	if !strings.Contains(got.Error(), "(qemu log: "+line+")") {
		t.Fatalf("got %v", got)
	}
	already := errors.New("start: " + line)
	if got := local.ExplainStart("bf-p-m1-0000", already); got != already {
		t.Fatalf("line added twice: %v", got)
	}
	remote := New(Config{URI: "qemu+tls://h/system"})
	if got := remote.ExplainStart("bf-p-m1-0000", already); got != already {
		t.Fatalf("remote host: %v", got)
	}
	if local.ExplainStart("bf-p-m1-0000", nil) != nil {
		t.Fatal("nil error became non-nil")
	}
}
