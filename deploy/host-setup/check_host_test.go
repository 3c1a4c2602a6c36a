// Package hostsetup tests the host setup's check script against libvirt
// configurations it must accept or refuse.
package hostsetup

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func runCheck(t *testing.T, qemuConf, libvirtdConf string) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"qemu.conf": qemuConf, "libvirtd.conf": libvirtdConf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("bash", "check-host.sh", "--conf-dir", dir, "--no-runtime").CombinedOutput()
	if err != nil {
		if _, isExit := err.(*exec.ExitError); !isExit {
			t.Fatal(err)
		}
	}
	return string(out), err == nil
}

func TestCheckHost(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		qemu, libvirtd string
		pass           bool
		want           string
	}{
		"defaults":     {pass: true, want: "agent payloads are not logged"},
		"qemu as root": {qemu: `user = "root"`, want: "QEMU would run as root"},
		"sVirt off":    {qemu: `security_driver = "none"`, want: "security_driver = none"},
		"unconfined":   {qemu: "security_default_confined = 0", want: "security_default_confined = 0"},
		"debug everywhere": {libvirtd: "log_level = 1\nlog_outputs=\"1:file:/var/log/libvirt/libvirtd.log\"",
			want: "qemu.qemu_agent libvirt-qemu util.json logged at debug"},
		"debug filter on qemu": {libvirtd: `log_filters="1:qemu 3:util"` + "\nlog_outputs=\"1:file:/l\"",
			want: "qemu.qemu_agent libvirt-qemu logged at debug"},
		"agent filtered, JSON parser not": {libvirtd: `log_filters="3:qemu.qemu_agent 3:libvirt-qemu 1:*"` + "\nlog_outputs=\"1:file:/l\"",
			want: "util.json logged at debug"},
		"debug glob": {libvirtd: `log_filters="1:*"` + "\nlog_outputs=\"1:journald\"", want: "logged at debug"},
		"agent filtered first": {libvirtd: `log_filters="3:qemu.qemu_agent 3:libvirt-qemu 3:util.json 1:*"` + "\nlog_outputs=\"1:file:/l\"",
			pass: true, want: "qemu.qemu_agent at level 3, libvirt-qemu at 3, util.json at 3"},
		"agent module only": {libvirtd: `log_filters="3:qemu.qemu_agent 1:qemu"` + "\nlog_outputs=\"1:file:/l\"",
			want: "libvirt-qemu logged at debug"},
		"agent filtered after a broader debug filter": {libvirtd: `log_filters="1:qemu 3:qemu.qemu_agent"` + "\nlog_outputs=\"1:file:/l\"",
			want: "logged at debug"},
		"debug filter, outputs at warning": {libvirtd: `log_filters="1:qemu"` + "\nlog_outputs=\"3:file:/l\"", pass: true},
		"commented out":                    {libvirtd: "#log_level = 1\n#log_outputs=\"1:file:/l\"", pass: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, pass := runCheck(t, tc.qemu, tc.libvirtd)
			if pass != tc.pass || !strings.Contains(out, tc.want) {
				t.Fatalf("pass = %v, want %v; output:\n%s", pass, tc.pass, out)
			}
		})
	}
}
