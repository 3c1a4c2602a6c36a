package virt

import (
	"errors"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"qemu:///system", "qemu:///system"},
		{"test:///default", "test:///default"},
		{"qemu+libssh://admin:pw@host:2222/system?keyfile=/secret/id&known_hosts=/secret/kh", "qemu+libssh://host:2222/system"},
		{"qemu+tls://host/system?pkipath=/secret/pki#frag", "qemu+tls://host/system"},
		{"qemu+unix:///system?socket=/secret/sock", "qemu+unix:///system"},
		{"::::", "<unparseable URI>"},
	}
	for _, tc := range tests {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestScrubKeepsClassification(t *testing.T) {
	t.Parallel()
	raw := "qemu+libssh://admin@h/system?keyfile=/secret/id_ed25519"
	base := errors.New("cannot open /secret/id_ed25519 for admin")
	err := Scrub(base, raw)
	if strings.Contains(err.Error(), "/secret/") || strings.Contains(err.Error(), "admin") {
		t.Fatalf("not scrubbed: %v", err)
	}
	if !errors.Is(err, base) {
		t.Fatal("scrub lost the cause")
	}
	if clean := errors.New("fine"); Scrub(clean, raw) != clean {
		t.Fatal("scrub wrapped a clean error")
	}
}

// A secret that contains another (the user name inside a key file's path)
// is redacted whole: seen in the lab as "The key is stored in
// '/run/[redacted]-lab/creds/lab2/known_hosts'".
func TestScrubLongestSecretFirst(t *testing.T) {
	t.Parallel()
	raw := "qemu+libssh://bigfleet@lab2/system?keyfile=/run/bigfleet-lab/creds/lab2/id&known_hosts=/run/bigfleet-lab/creds/lab2/known_hosts&known_hosts_verify=normal"
	err := Scrub(errors.New("The key is stored in '/run/bigfleet-lab/creds/lab2/known_hosts'"), raw)
	if got, want := err.Error(), "The key is stored in '[redacted]'"; got != want {
		t.Fatalf("scrubbed to %q, want %q", got, want)
	}
}
