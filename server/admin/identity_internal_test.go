package admin

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"
)

func TestParseClientsRefusesMalformedPatterns(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"a,,b":           "empty",
		"a, ,b":          "empty",
		"*":              `"*" is allowed only`,
		"ops.*.corp":     `"*" is allowed only`,
		"*.*.corp":       `"*" is allowed only`,
		"*.corp":         "two labels",
		"*..corp.io":     "two labels",
		"*.":             "two labels",
		"alice smith":    "whitespace",
		"alice*":         `"*" is allowed only`,
		"spiffe://x/*":   `"*" is allowed only`,
		"ok,*.corp,fine": "two labels",
	} {
		_, err := ParseClients(in)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--admin-clients") {
			t.Errorf("ParseClients(%q) = %v; want an error naming --admin-clients and %q", in, err, want)
		}
	}
	c, err := ParseClients(" alice@corp.io , *.ops.corp.io,spiffe://corp/ops ")
	if err != nil || strings.Join(c.Patterns(), "|") != "alice@corp.io|*.ops.corp.io|spiffe://corp/ops" {
		t.Errorf("ParseClients = %v, %v", c.Patterns(), err)
	}
	if c, err := ParseClients(""); err != nil || len(c.Patterns()) != 0 {
		t.Errorf("empty list = %v, %v; want nobody", c.Patterns(), err)
	}
}

func TestClientsMatch(t *testing.T) {
	t.Parallel()
	c, err := ParseClients("alice@corp.io,*.ops.corp.io,spiffe://corp/ns/ops/sa/admin,Bob,admin.corp.io")
	if err != nil {
		t.Fatal(err)
	}
	uri := func(s string) *url.URL { u, _ := url.Parse(s); return u }
	cases := []struct {
		name        string
		cert        x509.Certificate
		pattern, id string
	}{
		{"email SAN", x509.Certificate{EmailAddresses: []string{"alice@corp.io"}}, "alice@corp.io", "alice@corp.io"},
		{"email is exact", x509.Certificate{EmailAddresses: []string{"Alice@corp.io"}}, "", ""},
		{"wildcard one label", x509.Certificate{DNSNames: []string{"carol.ops.corp.io"}}, "*.ops.corp.io", "carol.ops.corp.io"},
		{"wildcard is case-insensitive", x509.Certificate{DNSNames: []string{"Carol.OPS.corp.io"}}, "*.ops.corp.io", "Carol.OPS.corp.io"},
		{"wildcard not two labels", x509.Certificate{DNSNames: []string{"a.b.ops.corp.io"}}, "", ""},
		{"wildcard not the apex", x509.Certificate{DNSNames: []string{"ops.corp.io"}}, "", ""},
		{"wildcard not a suffix trick", x509.Certificate{DNSNames: []string{"evil.xops.corp.io"}}, "", ""},
		{"wildcard on the CN", x509.Certificate{Subject: pkix.Name{CommonName: "dave.ops.corp.io"}}, "*.ops.corp.io", "dave.ops.corp.io"},
		{"wildcard not on a URI", x509.Certificate{URIs: []*url.URL{uri("https://x.ops.corp.io")}}, "", ""},
		{"URI SAN exact", x509.Certificate{URIs: []*url.URL{uri("spiffe://corp/ns/ops/sa/admin")}}, "spiffe://corp/ns/ops/sa/admin", "spiffe://corp/ns/ops/sa/admin"},
		{"URI SAN prefix is not a match", x509.Certificate{URIs: []*url.URL{uri("spiffe://corp/ns/ops/sa/admin2")}}, "", ""},
		{"CN exact", x509.Certificate{Subject: pkix.Name{CommonName: "bob"}}, "Bob", "bob"},
		{"DNS exact", x509.Certificate{DNSNames: []string{"bigfleet.corp.io", "admin.corp.io"}}, "admin.corp.io", "admin.corp.io"},
		{"BigFleet's certificate", x509.Certificate{DNSNames: []string{"bigfleet.corp.io"}, Subject: pkix.Name{CommonName: "bigfleet"}}, "", ""},
		{"no names", x509.Certificate{}, "", ""},
	}
	for _, tc := range cases {
		p, id := c.match(namesOf(&tc.cert))
		if p != tc.pattern || id != tc.id {
			t.Errorf("%s: match = %q, %q; want %q, %q", tc.name, p, id, tc.pattern, tc.id)
		}
	}
	if p, _ := (Clients{}).match(namesOf(&x509.Certificate{Subject: pkix.Name{CommonName: "anyone"}})); p != "" {
		t.Errorf("the empty list allowed %q", p)
	}
}
