package admin

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"
)

// TestCA issues real certificates for tests of this package and of
// admin_test (this file is compiled into the package only under test).
type TestCA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewTestCA makes a self-signed P-256 CA.
func NewTestCA(t testing.TB) *TestCA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	return &TestCA{Cert: create(t, tmpl, tmpl, key, key), key: key}
}

// Issue signs a client certificate with tmpl's names (Subject, DNSNames,
// URIs, EmailAddresses, IPAddresses, ExtraExtensions) and returns it
// parsed back from DER, as the TLS stack would see it, and as a
// tls.Certificate a client can present.
func (ca *TestCA) Issue(t testing.TB, tmpl x509.Certificate) (*x509.Certificate, tls.Certificate) {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	c := create(t, &tmpl, ca.Cert, key, ca.key)
	return c, tls.Certificate{Certificate: [][]byte{c.Raw}, PrivateKey: key, Leaf: c}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func create(t testing.TB, tmpl, parent *x509.Certificate, key, signer *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
