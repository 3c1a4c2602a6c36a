package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func certFile(t *testing.T, uris ...string) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "c"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"c.test"}}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "c.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTokenFromCertificate: a lifecycle call made with a shard's
// certificate carries that shard's id and a fresh sequence unless the
// flags say otherwise; other certificates leave the token as given.
func TestTokenFromCertificate(t *testing.T) {
	t.Parallel()
	shard := certFile(t, "bigfleet://shard/s9")
	before := time.Now().UnixNano()
	if s, e, q := token(&opts{tlsCert: shard, epoch: 4}); s != "s9" || e != 4 || q < before {
		t.Errorf("token with a shard's certificate = %q, %d, %d; want s9, 4, ≥ %d", s, e, q, before)
	}
	if s, _, q := token(&opts{tlsCert: shard, shard: "other", seq: 7, seqSet: true}); s != "other" || q != 7 {
		t.Errorf("--shard and --seq given = %q, %d; want other, 7", s, q)
	}
	for _, f := range []string{certFile(t), certFile(t, "bigfleet://admin"), certFile(t, "bigfleet://shard/a", "bigfleet://shard/b"), "/no/such.pem", ""} {
		if s, _, q := token(&opts{tlsCert: f}); s != "" || q != 0 {
			t.Errorf("token with %s = %q, %d; want no token", f, s, q)
		}
	}
}
