package callerid

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/internal/testpki"
)

// certWith returns tmpl as x509 parses it back from DER, so URI SANs are
// what a real handshake would hand the guard.
func certWith(t testing.TB, tmpl x509.Certificate) *x509.Certificate {
	t.Helper()
	if tmpl.Subject.CommonName == "" {
		tmpl.Subject = pkix.Name{CommonName: "test"}
	}
	_, c, err := testpki.Issue(nil, nil, &tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func uris(t testing.TB, ss ...string) []*url.URL {
	t.Helper()
	var out []*url.URL
	for _, s := range ss {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("url.Parse(%q): %v", s, err)
		}
		out = append(out, u)
	}
	return out
}

func TestOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		tmpl  x509.Certificate
		role  Role
		shard string
	}{
		{"shard", x509.Certificate{URIs: uris(t, "bigfleet://shard/s1"), DNSNames: []string{"shard-s1.bigfleet.svc"}}, RoleShard, "s1"},
		{"readonly", x509.Certificate{URIs: uris(t, "bigfleet://readonly")}, RoleReadonly, ""},
		{"admin", x509.Certificate{URIs: uris(t, "bigfleet://admin")}, RoleAdmin, ""},
		{"other URI SANs do not count", x509.Certificate{URIs: uris(t, "spiffe://corp/ns/x", "bigfleet://admin")}, RoleAdmin, ""},
		{"none", x509.Certificate{DNSNames: []string{"shard-s1.bigfleet.svc"}}, RoleNone, ""},
		{"DNS SAN spelling a URI", x509.Certificate{DNSNames: []string{"BIGFLEET://ADMIN", "bigfleet://shard/s1"}}, RoleNone, ""},
		{"CN spelling a URI", x509.Certificate{Subject: pkix.Name{CommonName: "bigfleet://admin"}}, RoleNone, ""},
		{"e-mail SAN", x509.Certificate{EmailAddresses: []string{"admin@bigfleet"}}, RoleNone, ""},
		{"two", x509.Certificate{URIs: uris(t, "bigfleet://shard/s1", "bigfleet://admin")}, RoleSeveral, ""},
		{"two shards", x509.Certificate{URIs: uris(t, "bigfleet://shard/s1", "bigfleet://shard/s2")}, RoleSeveral, ""},
		{"scheme is case-insensitive (RFC 3986)", x509.Certificate{URIs: uris(t, "BIGFLEET://admin")}, RoleAdmin, ""},
		{"upper-case role", x509.Certificate{URIs: uris(t, "bigfleet://ADMIN")}, RoleMalformed, ""},
		{"unknown role", x509.Certificate{URIs: uris(t, "bigfleet://root")}, RoleMalformed, ""},
		{"shard without id", x509.Certificate{URIs: uris(t, "bigfleet://shard/")}, RoleMalformed, ""},
		{"shard with two segments", x509.Certificate{URIs: uris(t, "bigfleet://shard/s1/x")}, RoleMalformed, ""},
		{"escaped shard id", x509.Certificate{URIs: uris(t, "bigfleet://shard/s%31")}, RoleMalformed, ""},
		{"escaped slash", x509.Certificate{URIs: uris(t, "bigfleet://shard/a%2Fb")}, RoleMalformed, ""},
		{"query", x509.Certificate{URIs: uris(t, "bigfleet://shard/s1?x=1")}, RoleMalformed, ""},
		{"fragment", x509.Certificate{URIs: uris(t, "bigfleet://admin#x")}, RoleMalformed, ""},
		{"user", x509.Certificate{URIs: uris(t, "bigfleet://s1@shard/s1")}, RoleMalformed, ""},
		{"port", x509.Certificate{URIs: uris(t, "bigfleet://admin:1")}, RoleMalformed, ""},
		{"trailing slash", x509.Certificate{URIs: uris(t, "bigfleet://admin/")}, RoleMalformed, ""},
		{"opaque", x509.Certificate{URIs: uris(t, "bigfleet:admin")}, RoleMalformed, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := Of(certWith(t, tc.tmpl))
			if id.Role != tc.role || id.Shard != tc.shard {
				t.Errorf("Of = %v %q (SANs %q); want %v %q", id.Role, id.Shard, id.SANs, tc.role, tc.shard)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	shard := Identity{Role: RoleShard, Shard: "s1", SANs: []string{"bigfleet://shard/s1"}}
	ro := Identity{Role: RoleReadonly, SANs: []string{"bigfleet://readonly"}}
	adm := Identity{Role: RoleAdmin, SANs: []string{"bigfleet://admin"}}
	none := Identity{Role: RoleNone}
	two := Identity{Role: RoleSeveral, SANs: []string{"bigfleet://shard/s1", "bigfleet://admin"}}
	bad := Identity{Role: RoleMalformed, SANs: []string{"bigfleet://root"}}
	cases := []struct {
		name     string
		mutation bool
		shard    string
		cert     bool
		id       Identity
		want     Reason // "" allowed
	}{
		{"shard mutates its own", true, "s1", true, shard, ""},
		{"shard reads", false, "", true, shard, ""},
		{"readonly reads", false, "", true, ro, ""},
		{"admin reads", false, "", true, adm, ""},
		{"shard mutates another's", true, "s2", true, shard, ReasonShardMismatch},
		{"shard id prefix", true, "s", true, shard, ReasonShardMismatch},
		{"shard id case", true, "S1", true, shard, ReasonShardMismatch},
		{"empty shard_id", true, "", true, shard, ReasonEmptyShard},
		{"readonly mutates", true, "s1", true, ro, ReasonReadOnly},
		{"admin mutates", true, "s1", true, adm, ReasonReadOnly},
		{"no SAN mutates", true, "s1", true, none, ReasonNoSAN},
		{"no SAN reads", false, "", true, none, ReasonNoSAN},
		{"two SANs read", false, "", true, two, ReasonSeveral},
		{"two SANs mutate", true, "s1", true, two, ReasonSeveral},
		{"malformed reads", false, "", true, bad, ReasonMalformed},
		{"no certificate", false, "", false, Identity{}, ReasonNoCertificate},
	}
	for _, tc := range cases {
		r := Decide("Create", tc.mutation, tc.shard, tc.cert, tc.id)
		switch {
		case tc.want == "" && r != nil:
			t.Errorf("%s: refused (%s): %s", tc.name, r.Reason, r.Msg)
		case tc.want != "" && r == nil:
			t.Errorf("%s: allowed; want %s", tc.name, tc.want)
		case tc.want != "" && r.Reason != tc.want:
			t.Errorf("%s: reason %s; want %s", tc.name, r.Reason, tc.want)
		case r != nil && (!strings.Contains(r.Msg, "Create") || !strings.Contains(r.Msg, r.Presented) || !strings.Contains(r.Msg, r.Needed)):
			t.Errorf("%s: message %q does not name the method, what was presented and what was needed", tc.name, r.Msg)
		}
	}
}

// TestRefusalNamesOnlyBigFleetSANs: the message names the certificate's
// bigfleet:// URI SANs and the request's shard_id, never its other names.
func TestRefusalNamesOnlyBigFleetSANs(t *testing.T) {
	t.Parallel()
	c := certWith(t, x509.Certificate{Subject: pkix.Name{CommonName: "secret-cn"}, DNSNames: []string{"secret-dns.corp"},
		EmailAddresses: []string{"secret@corp"}, URIs: uris(t, "spiffe://secret/ns", "bigfleet://shard/s2")})
	r := Decide("Delete", true, "s1", true, Of(c))
	if r == nil || r.Reason != ReasonShardMismatch {
		t.Fatalf("Decide = %+v", r)
	}
	for _, secret := range []string{"secret-cn", "secret-dns", "secret@corp", "spiffe"} {
		if strings.Contains(r.Msg, secret) {
			t.Errorf("message %q names %q", r.Msg, secret)
		}
	}
	for _, want := range []string{"bigfleet://shard/s2", "bigfleet://shard/s1", "Delete"} {
		if !strings.Contains(r.Msg, want) {
			t.Errorf("message %q lacks %q", r.Msg, want)
		}
	}
	long := Decide("Create", true, strings.Repeat("x", 10_000)+"\x00", true, Of(c))
	if len(long.Msg) > 512 || strings.ContainsRune(long.Msg, 0) {
		t.Errorf("a long, binary shard_id is echoed as %d bytes: %q", len(long.Msg), long.Msg[:80])
	}
}

func TestRecentKeepsTheNewest(t *testing.T) {
	t.Parallel()
	r := newRing(3)
	if got := r.list(); len(got) != 0 {
		t.Fatalf("empty ring lists %v", got)
	}
	for i := range 5 {
		r.add(Rejection{Method: string(rune('a' + i))})
	}
	got := r.list()
	if len(got) != 3 || got[0].Method != "e" || got[1].Method != "d" || got[2].Method != "c" {
		t.Errorf("list = %+v; want e, d, c", got)
	}
}

// FuzzOf: whatever URI SANs a certificate carries, a role is granted only
// for exactly one bigfleet:// SAN in canonical form, and a shard's id
// spells back into that SAN.
func FuzzOf(f *testing.F) {
	for _, s := range []string{"bigfleet://shard/s1", "bigfleet://admin", "bigfleet://readonly", "BIGFLEET://admin",
		"bigfleet://shard/a%2Fb", "bigfleet://shard/s1?x", "spiffe://x/y", "bigfleet:admin", "bigfleet://shard/ü"} {
		f.Add(s, "")
		f.Add(s, "bigfleet://admin")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		var c x509.Certificate
		for _, s := range []string{a, b} {
			if u, err := url.Parse(s); err == nil && s != "" {
				c.URIs = append(c.URIs, u)
			}
		}
		id := Of(&c)
		switch id.Role {
		case RoleShard:
			if len(id.SANs) != 1 || id.SANs[0] != "bigfleet://shard/"+id.Shard || strings.Contains(id.Shard, "/") {
				t.Fatalf("shard %q from SANs %q", id.Shard, id.SANs)
			}
		case RoleAdmin, RoleReadonly:
			if len(id.SANs) != 1 || id.SANs[0] != "bigfleet://"+id.Role.String() {
				t.Fatalf("%v from SANs %q", id.Role, id.SANs)
			}
		case RoleSeveral:
			if len(id.SANs) < 2 {
				t.Fatalf("several from %q", id.SANs)
			}
		}
	})
}
