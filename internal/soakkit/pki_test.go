package soakkit

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Each caller's certificate carries exactly its BigFleet URI SAN, is a
// client certificate, and chains to the CA the provider is told to trust.
func TestCallers(t *testing.T) {
	dir := t.TempDir()
	uris := []string{"bigfleet://shard/s1", "bigfleet://admin"}
	flags, cfgs, err := Callers(dir, uris...)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--tls-cert=" + filepath.Join(dir, "server.pem"), "--tls-key=" + filepath.Join(dir, "server-key.pem"),
		"--tls-ca=" + filepath.Join(dir, "ca.pem"), "--admin-write"}
	if !slices.Equal(flags, want) {
		t.Fatalf("flags %q, want %q", flags, want)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, u := range uris {
		leaf := cfgs[u].Certificates[0].Leaf
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != u {
			t.Errorf("%s: URI SANs %v", u, leaf.URIs)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
}
