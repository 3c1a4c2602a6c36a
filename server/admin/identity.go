package admin

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/bigfleet/libvirt-provider/server/callerid"
)

// Anonymous is the identity of a caller without a verified client
// certificate (insecure mode, plain TLS, or the page over h2c).
const Anonymous = "anonymous"

// Clients is the --admin-clients allow-list: the callers whose verified
// client certificate may run admin writes. The zero value allows nobody.
//
// Each pattern has a type, and matches names of that type only:
//   - "uri:spiffe://corp/ops", or any pattern containing "://": a URI SAN,
//     byte for byte ("bigfleet://admin" is BigFleet's admin tooling,
//     ADR-0060).
//   - "email:ops@example.com", or any other pattern containing "@": an
//     e-mail SAN, byte for byte.
//   - "dns:alice.example.com", or any other pattern: a DNS SAN, or the
//     subject CN of a certificate without SANs (RFC 6125 6.4.4, as Go's
//     VerifyHostname: a CA that issues SANs does not vouch for the CN),
//     ASCII case-insensitively; "*.ops.example.com" matches exactly one
//     more leftmost label ("alice.ops.example.com", not "ops.example.com"
//     nor "a.b.ops.example.com"), as TLS hostname wildcards do.
//
// So a DNS SAN that spells "BIGFLEET://ADMIN" never passes for the URI
// SAN bigfleet://admin. An untyped pattern with a ':' that is neither form
// is refused: its type would be a guess.
//
// Patterns are printable ASCII. A presented name with a non-ASCII byte, a
// control character or a '*' (a wildcard certificate) matches nothing: a
// wildcard grants only on the operator's side of the comparison.
type Clients struct{ patterns []pattern }

// pattern is one typed --admin-clients entry.
type pattern struct {
	text  string // as the operator wrote it: the metric label
	kind  nameKind
	value string // without its type prefix
}

type nameKind int

const (
	kindDNS nameKind = iota
	kindURI
	kindEmail
)

// DefaultAdminClient is the allow-list under mTLS when --admin-clients is
// empty: BigFleet's admin identity (ADR-0060).
const DefaultAdminClient = "uri:bigfleet://admin"

// ParseClients reads the comma-separated --admin-clients value. Malformed
// patterns are refused rather than ignored: a typo that silently allowed
// nobody (or everybody) is worse than a failed start.
func ParseClients(s string) (Clients, error) {
	var c Clients
	if strings.TrimSpace(s) == "" {
		return c, nil
	}
	for _, text := range strings.Split(s, ",") {
		text = strings.TrimSpace(text)
		p, err := parsePattern(text)
		if err != nil {
			return Clients{}, fmt.Errorf("--admin-clients: pattern %q: %w", text, err)
		}
		c.patterns = append(c.patterns, p)
	}
	return c, nil
}

func parsePattern(text string) (pattern, error) {
	p := pattern{text: text, kind: kindDNS, value: text}
	typed := false
	for prefix, k := range map[string]nameKind{"dns:": kindDNS, "uri:": kindURI, "email:": kindEmail} {
		if v, ok := strings.CutPrefix(text, prefix); ok {
			p.kind, p.value, typed = k, v, true
		}
	}
	if !typed {
		switch {
		case strings.Contains(text, "://"):
			p.kind = kindURI
		case strings.Contains(text, "@"):
			p.kind = kindEmail
		case strings.Contains(text, ":"):
			return p, errors.New(`its type is ambiguous: write it as "uri:…", "dns:…" or "email:…"`)
		}
	}
	return p, checkPattern(p)
}

func checkPattern(p pattern) error {
	v := p.value
	rest, wild := strings.CutPrefix(v, "*.")
	switch {
	case v == "":
		return errors.New("empty (a stray comma?)")
	case strings.ContainsAny(v, " \t\r\n"):
		return errors.New("contains whitespace")
	case !printableASCII(v):
		return errors.New("want printable ASCII (names are compared as ASCII)")
	case p.kind != kindDNS && strings.Contains(v, "*"):
		return errors.New(`"*" is allowed only as a leading "*." label of a DNS pattern`)
	case strings.Contains(rest, "*"):
		return errors.New(`"*" is allowed only as a leading "*." label`)
	case wild && (rest == "" || strings.HasPrefix(rest, ".") || !strings.Contains(rest, ".")):
		return errors.New(`a wildcard needs a domain of two labels or more after "*."`)
	case p.kind == kindDNS && strings.ContainsAny(v, ":@/"):
		return errors.New(`a DNS name has no ':', '@' or '/'`)
	}
	return nil
}

// Patterns returns the allow-list as written, in flag order.
func (c Clients) Patterns() []string {
	out := make([]string, len(c.patterns))
	for i, p := range c.patterns {
		out[i] = p.text
	}
	return out
}

// match returns the first pattern that allows one of names, and that name.
func (c Clients) match(n certNames) (pattern, name string) {
	for _, p := range c.patterns {
		if name := matchPattern(p, n); name != "" {
			return p.text, name
		}
	}
	return "", ""
}

// matchPattern returns the name of n that p allows, or "": names of p's
// type only.
func matchPattern(p pattern, n certNames) string {
	switch p.kind {
	case kindURI:
		return exact(p.value, n.uris)
	case kindEmail:
		return exact(p.value, n.emails)
	}
	suffix, wild := strings.CutPrefix(p.value, "*.")
	for _, d := range n.dnsLike() {
		if !presentable(d) {
			continue
		}
		if wild {
			if label, tail, ok := strings.Cut(d, "."); ok && label != "" && asciiEqualFold(tail, suffix) {
				return d
			}
		} else if asciiEqualFold(d, p.value) {
			return d
		}
	}
	return ""
}

func exact(want string, names []string) string {
	for _, v := range names {
		if v == want {
			return v
		}
	}
	return ""
}

// presentable reports whether a DNS SAN or CN may match at all: printable
// ASCII without '*'. A '*' in a certificate's name is a wildcard the CA
// granted for TLS servers; it names no one caller, so it allows nothing.
func presentable(name string) bool {
	return printableASCII(name) && !strings.Contains(name, "*")
}

// printableASCII reports whether s is non-empty and only bytes '!'..'~'.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return s != ""
}

// asciiEqualFold is strings.EqualFold for ASCII only. strings.EqualFold
// folds Unicode too ("ſ" U+017F equals "s", the Kelvin sign U+212A equals
// "k"), which would let a CN spelled with them pass for an ASCII pattern.
// Any byte outside ASCII is a mismatch.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x >= utf8.RuneSelf || y >= utf8.RuneSelf || asciiLower(x) != asciiLower(y) {
			return false
		}
	}
	return true
}

func asciiLower(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// certNames are the names of a verified client certificate.
type certNames struct {
	dns, uris, emails, ips []string
	cn                     string // only of a certificate without SANs
}

func namesOf(c *x509.Certificate) certNames {
	n := certNames{dns: c.DNSNames, emails: c.EmailAddresses}
	for _, u := range c.URIs {
		n.uris = append(n.uris, u.String())
	}
	for _, ip := range c.IPAddresses {
		n.ips = append(n.ips, ip.String())
	}
	if !hasSAN(c) {
		n.cn = c.Subject.CommonName
	}
	return n
}

var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// hasSAN reports whether c has a subjectAltName, including one of only
// kinds Go does not parse (otherName, registeredID, directoryName): its
// CN is then ignored, as Go's own hostname verification does.
func hasSAN(c *x509.Certificate) bool {
	if len(c.DNSNames)+len(c.URIs)+len(c.EmailAddresses)+len(c.IPAddresses) > 0 {
		return true
	}
	return slices.ContainsFunc(c.Extensions, func(e pkix.Extension) bool { return e.Id.Equal(oidSubjectAltName) })
}

// dnsLike are the names DNS rules apply to: DNS SANs, or the CN of a
// certificate without SANs.
func (n certNames) dnsLike() []string {
	if n.cn == "" {
		return n.dns
	}
	return append(append([]string(nil), n.dns...), n.cn)
}

// display is what logs and the page call an unlisted caller: its most
// specific name.
func (n certNames) display() string {
	for _, l := range [][]string{n.uris, n.dns, n.emails, n.ips, {n.cn}} {
		for _, v := range l {
			if v != "" {
				return v
			}
		}
	}
	return "(certificate without names)"
}

type certKey struct{}

// withCaller records the caller's verified client certificate for the
// handlers. Only VerifiedChains counts: a certificate the TLS stack did
// not verify against the listener's CA is no identity at all.
func withCaller(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if leaf := callerid.VerifiedLeaf(r); leaf != nil {
			n := namesOf(leaf)
			r = r.WithContext(context.WithValue(r.Context(), certKey{}, &n))
		}
		h.ServeHTTP(w, r)
	})
}

func callerNames(ctx context.Context) (*certNames, bool) {
	n, ok := ctx.Value(certKey{}).(*certNames)
	return n, ok
}
