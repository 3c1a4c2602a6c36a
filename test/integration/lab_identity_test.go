//go:build integration && lab

package integration

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// TestLabIdentity (check 2): the provider refuses a host whose identity it
// cannot verify, and a host refuses a provider identity it does not allow;
// either way the host is reported down with the cause, and the provider
// backs off instead of redialling in a hot loop.
//
// Each subtest builds its own credentials (a pkipath directory in a temp
// dir, passed with its own --credentials-dir after the lab's; the last flag
// wins) and its own hosts file, so the shared /run/bigfleet-lab/creds stay
// as they are. Only (b) changes a host: lab2's SSH host key, put back at
// cleanup.
func TestLabIdentity(t *testing.T) {
	e := loadLab(t)

	// (a) A client certificate signed by the lab CA whose DN is not on
	// lab1's tls_allowed_dn_list: libvirtd ends the TLS session at connect.
	t.Run("dn-not-allowed", func(t *testing.T) {
		cn := "intruder-" + identityRand(t)
		subject := "/CN=" + cn + "/O=BigFleet"
		root := t.TempDir()
		pkipath := filepath.Join(root, "lab1")
		identityPKI(t, e, "client", filepath.Join(e.State, "pki", "ca"), subject, pkipath)
		hosts := labHosts{Hosts: []labHost{{Name: "lab1", Zone: "lab1", URI: "qemu+tls://lab1/system?pkipath=" + pkipath}}}

		// libvirtd logs each refused session at debug with the DN.
		denial := "Failed ACL check for client DN 'CN=" + cn + ",O=BigFleet'"
		hostLog := e.hostFile("lab1", "var/log/libvirt/libvirtd.log")
		mark := labLogMark(hostLog)
		t0 := time.Now()
		p := startLab(t, e, "lab-id-dn", hosts, 1, []string{"--credentials-dir=" + root})

		h := identityAwaitDown(t, p, "lab1", "TLS")
		t.Logf("lab1 with DN %s: connected=%v last_error=%q", cn, h.GetConnected(), h.GetLastError())
		waitUntil(t, 10*time.Second, "lab1's libvirtd to log the refused DN", func() bool {
			return strings.Contains(labLogSince(t, hostLog, mark), denial)
		})
		identityWarned(t, p, "lab1")

		// No hot loop: count the host's refusals of this DN (and the
		// provider's own dial lines) over 20 s of the provider's life.
		time.Sleep(time.Until(t0.Add(20 * time.Second)))
		attempts := strings.Count(labLogSince(t, hostLog, mark), denial)
		dials := identityDialLines(p, "lab1")
		t.Logf("in %s: lab1 refused DN %s %d times; the provider logged %d failed dials",
			time.Since(t0).Round(time.Second), cn, attempts, dials)
		if attempts < 2 || attempts > 10 {
			t.Errorf("lab1 saw %d connection attempts with the refused DN in ~20 s, want 2..10 (backoff, not a hot loop, not giving up)", attempts)
		}
		if dials > 10 {
			t.Errorf("the provider logged %d failed dials of lab1 in ~20 s, want <= 10", dials)
		}
		if h := p.host(t, "lab1"); h == nil || h.GetConnected() {
			t.Errorf("lab1 connected with a DN that is not allowed: %v", h)
		}
	})

	// (b) lab2 (libssh, libvirt 11.3) presents a new SSH host key; the
	// provider's pinned known_hosts (the lab's, known_hosts_verify=normal)
	// still holds the old one. Once the original key is back it connects.
	t.Run("ssh-hostkey-changed", func(t *testing.T) {
		hosts := e.labHosts(t, e.Hosts).only("lab2")
		if len(hosts.Hosts) != 1 || !strings.HasPrefix(hosts.Hosts[0].URI, "qemu+libssh://") ||
			!strings.Contains(hosts.Hosts[0].URI, "known_hosts_verify=normal") {
			t.Fatalf("lab2 is not a pinned libssh host in %s: %+v", e.Hosts, hosts)
		}
		// Registered before the fault: the key comes back whatever happens.
		t.Cleanup(func() { identityRestoreHostKey(t, e, "lab2") })
		e.lab(t, "fault", "lab2", "swap-hostkey")
		p := startLab(t, e, "lab-id-hk", hosts, 1, nil)

		h := identityAwaitDown(t, p, "lab2", "HOST KEY VERIFICATION FAILED")
		t.Logf("lab2 with a swapped host key: connected=%v last_error=%q", h.GetConnected(), h.GetLastError())
		if !strings.Contains(h.GetLastError(), "differs from stored identity") {
			t.Errorf("lab2's last_error does not say the host's identity changed: %q", h.GetLastError())
		}
		identityWarned(t, p, "lab2")

		// The original key back (what `lab.sh heal` does for this fault).
		identityRestoreHostKey(t, e, "lab2")
		d := p.awaitHost(t, "lab2", true)
		t.Logf("lab2 connected %s after its original host key was restored", d)
		if h := p.host(t, "lab2"); h.GetLastError() != "" {
			t.Errorf("lab2 connected but last_error is %q", h.GetLastError())
		}
	})

	// (c) A host presenting a certificate from a CA the provider does not
	// trust. The provider's pkipath trusts only the lab's foreign CA, and
	// holds a client certificate with the allowed DN signed by that CA
	// (libvirt's client refuses to load a client certificate its own
	// cacert.pem did not sign, so a lab-CA client certificate would fail
	// before dialling: checked second). lab1 presents its lab-CA server
	// certificate, which the provider cannot verify.
	t.Run("server-cert-foreign-ca", func(t *testing.T) {
		root := t.TempDir()
		// A copy of the foreign CA: minting writes a serial file beside it.
		fca := filepath.Join(root, "foreign-ca")
		must(t, os.MkdirAll(fca, 0o700))
		for _, f := range []string{"ca.pem", "ca.key"} {
			raw, err := os.ReadFile(filepath.Join(e.State, "pki", "foreign-ca", f))
			must(t, err)
			must(t, os.WriteFile(filepath.Join(fca, f), raw, 0o600))
		}
		pkipath := filepath.Join(root, "foreign")
		identityPKI(t, e, "client", fca, "/CN=bigfleet-provider/O=BigFleet", pkipath)
		hosts := labHosts{Hosts: []labHost{{Name: "lab1", Zone: "lab1", URI: "qemu+tls://lab1/system?pkipath=" + pkipath}}}
		p := startLab(t, e, "lab-id-ca", hosts, 1, []string{"--credentials-dir=" + root})
		h := identityAwaitDown(t, p, "lab1", "certificate")
		t.Logf("lab1 seen through the foreign CA: connected=%v last_error=%q", h.GetConnected(), h.GetLastError())
		if !strings.Contains(h.GetLastError(), "Failed to verify peer's certificate") {
			t.Errorf("lab1's last_error does not say its certificate failed verification: %q", h.GetLastError())
		}
		identityWarned(t, p, "lab1")

		// The brief's literal recipe: cacert.pem the foreign CA, the
		// lab-CA client certificate with the allowed DN. Refused too, by
		// libvirt's own check of the client's certificate against the CA.
		root2 := t.TempDir()
		mixed := filepath.Join(root2, "mixed")
		identityPKI(t, e, "client", filepath.Join(e.State, "pki", "ca"), "/CN=bigfleet-provider/O=BigFleet", mixed)
		foreign, err := os.ReadFile(filepath.Join(e.State, "pki", "foreign-ca", "ca.pem"))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(mixed, "cacert.pem"), foreign, 0o644))
		hosts2 := labHosts{Hosts: []labHost{{Name: "lab1", Zone: "lab1", URI: "qemu+tls://lab1/system?pkipath=" + mixed}}}
		p2 := startLab(t, e, "lab-id-ca2", hosts2, 1, []string{"--credentials-dir=" + root2})
		h2 := identityAwaitDown(t, p2, "lab1", "certificate")
		t.Logf("lab1 with a foreign cacert.pem and a lab-CA client certificate: connected=%v last_error=%q", h2.GetConnected(), h2.GetLastError())
		if !strings.Contains(h2.GetLastError(), "failed validation") {
			t.Errorf("last_error does not say the certificate failed validation: %q", h2.GetLastError())
		}
		if strings.Contains(h2.GetLastError(), root2) {
			t.Errorf("last_error shows the credential path: %q", h2.GetLastError())
		}
	})
}

// identityAwaitDown waits until the admin API reports host disconnected
// with a last_error containing want (the first dial's outcome, not the
// initial "not connected yet"), and checks it stays disconnected.
func identityAwaitDown(t *testing.T, p *labProvider, name, want string) *adminv1.Host {
	t.Helper()
	var last *adminv1.Host
	waitUntil(t, 60*time.Second, "host "+name+" down with an error mentioning "+want, func() bool {
		h := p.host(t, name)
		if h == nil {
			return false
		}
		last = h
		return !h.GetConnected() && strings.Contains(h.GetLastError(), want)
	})
	return last
}

// identityWarned checks the provider logged the refusal at WARN for host.
func identityWarned(t *testing.T, p *labProvider, host string) {
	t.Helper()
	waitUntil(t, 10*time.Second, "a WARN line about "+host, func() bool {
		for _, l := range strings.Split(p.out.String(), "\n") {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "libvirt host unreachable") &&
				strings.Contains(l, "host="+host) {
				t.Logf("provider: %s", l)
				return true
			}
		}
		return false
	})
}

// identityDialLines counts the provider's failed-dial lines for host (WARN
// on the first, DEBUG on each retry: the provider runs at debug).
func identityDialLines(p *labProvider, host string) int {
	n := 0
	for _, l := range strings.Split(p.out.String(), "\n") {
		if (strings.Contains(l, "libvirt host unreachable") || strings.Contains(l, "libvirt host still unreachable")) &&
			strings.Contains(l, "host="+host) {
			n++
		}
	}
	return n
}

// identityRestoreHostKey puts the host's original SSH host key back, as
// `lab.sh heal` does for swap-hostkey, without heal's other effects (it
// also flushes the host's network faults and restarts its daemon, which
// other tests sharing the lab may have injected). Idempotent.
func identityRestoreHostKey(t *testing.T, e labEnv, host string) {
	t.Helper()
	e.lab(t, "exec", host, "sh", "-c", `
		if [ -s /etc/ssh/lab-orig/ssh_host_ed25519_key ]; then
			mv -f /etc/ssh/lab-orig/ssh_host_ed25519_key* /etc/ssh/ && rmdir /etc/ssh/lab-orig
			kill -HUP $(cat /run/sshd.pid)
		fi`)
}

// identityPKI runs scripts/lab/pki.sh.
func identityPKI(t *testing.T, e labEnv, args ...string) {
	t.Helper()
	script := filepath.Join(filepath.Dir(e.Script), "lab", "pki.sh")
	if out, err := exec.Command(script, args...).CombinedOutput(); err != nil {
		t.Fatalf("pki.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func identityRand(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, err := rand.Read(b)
	must(t, err)
	return hex.EncodeToString(b)
}

// labLogMark is the current size of a (host) log: read it later with
// labLogSince to see only what was written after.
func labLogMark(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// labLogSince is the log's content from mark on (all of it when the file
// shrank: rotated or truncated).
func labLogSince(t *testing.T, path string, mark int64) string {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	fi, err := f.Stat()
	must(t, err)
	if fi.Size() < mark {
		mark = 0
	}
	_, err = f.Seek(mark, io.SeekStart)
	must(t, err)
	raw, err := io.ReadAll(f)
	must(t, err)
	return string(raw)
}
