package admin

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"net"
	"net/url"
	"strings"
	"testing"
)

func TestParseClientsRefusesMalformedPatterns(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"a,,b":               "empty",
		"a, ,b":              "empty",
		"*":                  `"*" is allowed only`,
		"ops.*.corp":         `"*" is allowed only`,
		"*.*.corp":           `"*" is allowed only`,
		"*.corp":             "two labels",
		"*..corp.io":         "two labels",
		"*.":                 "two labels",
		"alice smith":        "whitespace",
		"alice*":             `"*" is allowed only`,
		"spiffe://x/*":       `"*" is allowed only`,
		"ok,*.corp,fine":     "two labels",
		"\u017fam":           "printable ASCII",
		"\u212aube.corp.io":  "printable ASCII",
		"*.op\u017f.corp.io": "printable ASCII",
		"a\x00b":             "printable ASCII",
		"a\x7fb":             "printable ASCII",
		"urn:ops":            "ambiguous",
		"dns:a@b":            "DNS name",
		"dns:spiffe://x":     "DNS name",
		"uri:":               "empty",
		"email:*@corp.io":    `"*" is allowed only`,
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

// TestClientsPatternsAreTyped: a pattern matches names of its own type
// only (issue 29: a DNS SAN spelling BIGFLEET://ADMIN passed for the URI
// pattern bigfleet://admin).
func TestClientsPatternsAreTyped(t *testing.T) {
	t.Parallel()
	uri := func(s string) []*url.URL { u, _ := url.Parse(s); return []*url.URL{u} }
	cases := []struct {
		patterns string
		cert     x509.Certificate
		want     string
	}{
		{"bigfleet://admin", x509.Certificate{URIs: uri("bigfleet://admin")}, "bigfleet://admin"},
		{"uri:bigfleet://admin", x509.Certificate{URIs: uri("bigfleet://admin")}, "uri:bigfleet://admin"},
		{"bigfleet://admin", x509.Certificate{DNSNames: []string{"BIGFLEET://ADMIN"}}, ""},
		{"bigfleet://admin", x509.Certificate{DNSNames: []string{"bigfleet://admin"}}, ""},
		{"bigfleet://admin", x509.Certificate{Subject: pkix.Name{CommonName: "bigfleet://admin"}}, ""},
		{"bigfleet://admin", x509.Certificate{EmailAddresses: []string{"bigfleet://admin"}}, ""},
		{"uri:bigfleet://admin", x509.Certificate{URIs: uri("BIGFLEET://ADMIN")}, ""},
		{"ops@corp.io", x509.Certificate{DNSNames: []string{"ops@corp.io"}}, ""},
		{"ops@corp.io", x509.Certificate{URIs: uri("mailto:ops@corp.io")}, ""},
		{"email:ops@corp.io", x509.Certificate{EmailAddresses: []string{"ops@corp.io"}}, "email:ops@corp.io"},
		{"dns:ops.corp.io", x509.Certificate{DNSNames: []string{"OPS.corp.io"}}, "dns:ops.corp.io"},
		{"dns:ops.corp.io", x509.Certificate{URIs: uri("dns:ops.corp.io")}, ""},
		{"dns:*.corp.io.example", x509.Certificate{DNSNames: []string{"a.corp.io.example"}}, "dns:*.corp.io.example"},
		{"uri:dns:ops.corp.io", x509.Certificate{URIs: uri("dns:ops.corp.io")}, "uri:dns:ops.corp.io"},
		{"ops.corp.io", x509.Certificate{URIs: uri("ops.corp.io")}, ""},
	}
	for _, tc := range cases {
		c, err := ParseClients(tc.patterns)
		if err != nil {
			t.Fatalf("ParseClients(%q): %v", tc.patterns, err)
		}
		if p, _ := c.match(namesOf(&tc.cert)); p != tc.want {
			t.Errorf("%q against %+v: matched %q; want %q", tc.patterns, namesOf(&tc.cert), p, tc.want)
		}
	}
}

// TestClientsMatchRealCertificates: names as x509 parses them from DER.
// A certificate with any SAN is named by its SANs alone (RFC 6125, Go's
// VerifyHostname); names compare ASCII-only case-insensitively; a '*' in a
// presented name grants nothing.
func TestClientsMatchRealCertificates(t *testing.T) {
	t.Parallel()
	c, err := ParseClients("Bob,admin.corp.io,*.ops.corp.io,sam,kube.corp.io,bob@corp.io,spiffe://corp/ops")
	if err != nil {
		t.Fatal(err)
	}
	ca := NewTestCA(t)
	cn := func(s string) pkix.Name { return pkix.Name{CommonName: s} }
	uri := func(s string) []*url.URL { u, _ := url.Parse(s); return []*url.URL{u} }
	cases := []struct {
		name        string
		tmpl        x509.Certificate
		pattern, id string
	}{
		{"CN used without SANs", x509.Certificate{Subject: cn("bob")}, "Bob", "bob"},
		{"CN wildcard without SANs", x509.Certificate{Subject: cn("dave.ops.corp.io")}, "*.ops.corp.io", "dave.ops.corp.io"},
		{"CN ignored beside a DNS SAN", x509.Certificate{Subject: cn("admin.corp.io"), DNSNames: []string{"bigfleet.corp.io"}}, "", ""},
		{"CN ignored beside an email SAN", x509.Certificate{Subject: cn("bob"), EmailAddresses: []string{"bob@elsewhere.io"}}, "", ""},
		{"CN ignored beside a URI SAN", x509.Certificate{Subject: cn("bob"), URIs: uri("spiffe://corp/other")}, "", ""},
		{"CN ignored beside an IP SAN", x509.Certificate{Subject: cn("bob"), IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}}, "", ""},
		{"CN ignored beside an otherName-only SAN", x509.Certificate{Subject: cn("bob"), ExtraExtensions: []pkix.Extension{otherNameSAN(t)}}, "", ""},
		{"SAN matches, CN irrelevant", x509.Certificate{Subject: cn("mallory"), DNSNames: []string{"ADMIN.Corp.IO"}}, "admin.corp.io", "ADMIN.Corp.IO"},
		{"email SAN", x509.Certificate{Subject: cn("x"), EmailAddresses: []string{"bob@corp.io"}}, "bob@corp.io", "bob@corp.io"},
		{"URI SAN", x509.Certificate{URIs: uri("spiffe://corp/ops")}, "spiffe://corp/ops", "spiffe://corp/ops"},
		{"long s is not s", x509.Certificate{Subject: cn("\u017fam")}, "", ""},
		{"Kelvin sign is not k", x509.Certificate{Subject: cn("\u212aube.corp.io")}, "", ""},
		{"long s in a wildcard's domain", x509.Certificate{Subject: cn("carol.op\u017f.corp.io")}, "", ""},
		{"Kelvin sign in a wildcard's label", x509.Certificate{Subject: cn("\u212a.ops.corp.io")}, "", ""},
		{"wildcard DNS SAN", x509.Certificate{DNSNames: []string{"*.ops.corp.io"}}, "", ""},
		{"wildcard DNS SAN vs exact", x509.Certificate{DNSNames: []string{"*.corp.io"}}, "", ""},
		{"partial-label wildcard DNS SAN", x509.Certificate{DNSNames: []string{"a*.ops.corp.io"}}, "", ""},
		{"wildcard CN", x509.Certificate{Subject: cn("*.ops.corp.io")}, "", ""},
		{"whitespace in a wildcard's label", x509.Certificate{Subject: cn("a b.ops.corp.io")}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cert, _ := ca.Issue(t, tc.tmpl)
			p, id := c.match(namesOf(cert))
			if p != tc.pattern || id != tc.id {
				t.Errorf("match = %q, %q; want %q, %q", p, id, tc.pattern, tc.id)
			}
		})
	}
}

// otherNameSAN is a subjectAltName holding only an otherName (a UPN),
// which Go parses into none of its SAN fields.
func otherNameSAN(t *testing.T) pkix.Extension {
	t.Helper()
	type otherName struct {
		ID    asn1.ObjectIdentifier
		Value asn1.RawValue `asn1:"explicit,tag:0"`
	}
	utf8, err := asn1.MarshalWithParams("bob@corp.io", "utf8")
	if err != nil {
		t.Fatal(err)
	}
	on, err := asn1.MarshalWithParams(otherName{
		ID:    asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 20, 2, 3},
		Value: asn1.RawValue{FullBytes: utf8},
	}, "tag:0")
	if err != nil {
		t.Fatal(err)
	}
	seq, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: on})
	if err != nil {
		t.Fatal(err)
	}
	return pkix.Extension{Id: oidSubjectAltName, Value: seq}
}

// FuzzClients: a pattern ParseClients accepts is printable ASCII with '*'
// only as a leading "*." label; a name it allows is printable ASCII without
// '*', and an exact DNS/CN match is exactly ASCII case folding.
func FuzzClients(f *testing.F) {
	for _, s := range [][2]string{
		{"Bob", "bob"}, {"sam", "\u017fam"}, {"kube.corp.io", "\u212aube.corp.io"}, {"*.ops.corp.io", "*.ops.corp.io"},
		{"*.ops.corp.io", "a.OPS.corp.io"}, {"a,b", "B"}, {"spiffe://x/y", "spiffe://x/y"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, patterns, name string) {
		c, err := ParseClients(patterns)
		if err != nil {
			return
		}
		for _, p := range c.Patterns() {
			if !printableASCII(p) || strings.Contains(strings.TrimPrefix(p, "*."), "*") {
				t.Fatalf("accepted pattern %q", p)
			}
		}
		for _, n := range []certNames{{dns: []string{name}}, {cn: name}} {
			p, got := c.match(n)
			if p == "" {
				continue
			}
			if got != name || !presentable(name) {
				t.Fatalf("%q allowed %q (as %q)", p, name, got)
			}
			p = strings.TrimPrefix(p, "dns:")
			if !strings.HasPrefix(p, "*.") && !strings.EqualFold(p, name) {
				t.Fatalf("%q allowed %q, which is not equal under case folding", p, name)
			}
		}
	})
}
