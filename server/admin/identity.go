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
)

// Anonymous is the identity of a caller without a verified client
// certificate (insecure mode, plain TLS, or the page over h2c).
const Anonymous = "anonymous"

// Clients is the --admin-clients allow-list: the callers whose verified
// client certificate may run admin writes. The zero value allows nobody.
//
// A certificate's names are its DNS, URI and email SANs; its subject CN
// counts only when it has no SAN at all (RFC 6125 6.4.4, as Go's
// VerifyHostname): a CA that issues SANs does not vouch for the CN.
//
// A pattern is either exact or a "*." wildcard:
//   - exact ("ops@example.com", "spiffe://corp/ops", "alice") matches a
//     certificate whose DNS, URI or email SAN, or CN, equals it; DNS names
//     and the CN compare ASCII case-insensitively, everything else byte for
//     byte.
//   - "*.ops.example.com" matches a DNS SAN or CN with exactly one more
//     leftmost label ("alice.ops.example.com", not "ops.example.com" nor
//     "a.b.ops.example.com"), as TLS hostname wildcards do, so a wildcard
//     never grants more than the subdomain an operator wrote.
//
// Patterns are printable ASCII. A presented name with a non-ASCII byte, a
// control character or a '*' (a wildcard certificate) matches nothing: a
// wildcard grants only on the operator's side of the comparison.
type Clients struct{ patterns []string }

// ParseClients reads the comma-separated --admin-clients value. Malformed
// patterns are refused rather than ignored: a typo that silently allowed
// nobody (or everybody) is worse than a failed start.
func ParseClients(s string) (Clients, error) {
	var c Clients
	if strings.TrimSpace(s) == "" {
		return c, nil
	}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if err := checkPattern(p); err != nil {
			return Clients{}, fmt.Errorf("--admin-clients: pattern %q: %w", p, err)
		}
		c.patterns = append(c.patterns, p)
	}
	return c, nil
}

func checkPattern(p string) error {
	rest, wild := strings.CutPrefix(p, "*.")
	switch {
	case p == "":
		return errors.New("empty (a stray comma?)")
	case strings.ContainsAny(p, " \t\r\n"):
		return errors.New("contains whitespace")
	case !printableASCII(p):
		return errors.New("want printable ASCII (names are compared as ASCII)")
	case strings.Contains(rest, "*"):
		return errors.New(`"*" is allowed only as a leading "*." label`)
	case wild && (rest == "" || strings.HasPrefix(rest, ".") || !strings.Contains(rest, ".")):
		return errors.New(`a wildcard needs a domain of two labels or more after "*."`)
	}
	return nil
}

// Patterns returns the allow-list, in flag order.
func (c Clients) Patterns() []string { return append([]string(nil), c.patterns...) }

// match returns the first pattern that allows one of names, and that name.
func (c Clients) match(n certNames) (pattern, name string) {
	for _, p := range c.patterns {
		if name := matchPattern(p, n); name != "" {
			return p, name
		}
	}
	return "", ""
}

// matchPattern returns the name of n that pattern p allows, or "".
func matchPattern(p string, n certNames) string {
	suffix, wild := strings.CutPrefix(p, "*.")
	for _, d := range n.dnsLike() {
		if !presentable(d) {
			continue
		}
		if wild {
			if label, tail, ok := strings.Cut(d, "."); ok && label != "" && asciiEqualFold(tail, suffix) {
				return d
			}
		} else if asciiEqualFold(d, p) {
			return d
		}
	}
	if wild {
		return "" // wildcards are for DNS names only
	}
	for _, v := range append(append([]string(nil), n.uris...), n.emails...) {
		if v == p {
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
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
			n := namesOf(r.TLS.VerifiedChains[0][0])
			r = r.WithContext(context.WithValue(r.Context(), certKey{}, &n))
		}
		h.ServeHTTP(w, r)
	})
}

func callerNames(ctx context.Context) (*certNames, bool) {
	n, ok := ctx.Value(certKey{}).(*certNames)
	return n, ok
}
