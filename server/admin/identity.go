package admin

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Anonymous is the identity of a caller without a verified client
// certificate (insecure mode, plain TLS, or the page over h2c).
const Anonymous = "anonymous"

// Clients is the --admin-clients allow-list: the callers whose verified
// client certificate may run admin writes. The zero value allows nobody.
//
// A pattern is either exact or a "*." wildcard:
//   - exact ("ops@example.com", "spiffe://corp/ops", "alice") matches a
//     certificate whose DNS, URI or email SAN, or subject CN, equals it;
//     DNS names compare case-insensitively, everything else byte for byte.
//   - "*.ops.example.com" matches a DNS SAN or CN with exactly one more
//     leftmost label ("alice.ops.example.com", not "ops.example.com" nor
//     "a.b.ops.example.com"), as TLS hostname wildcards do, so a wildcard
//     never grants more than the subdomain an operator wrote.
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
		if suffix, wild := strings.CutPrefix(p, "*."); wild {
			for _, d := range n.dnsLike() {
				if label, tail, ok := strings.Cut(d, "."); ok && label != "" && strings.EqualFold(tail, suffix) {
					return p, d
				}
			}
			continue
		}
		for _, d := range n.dnsLike() {
			if strings.EqualFold(d, p) {
				return p, d
			}
		}
		for _, v := range append(append([]string(nil), n.uris...), n.emails...) {
			if v == p {
				return p, v
			}
		}
	}
	return "", ""
}

// certNames are the names of a verified client certificate.
type certNames struct {
	dns, uris, emails []string
	cn                string
}

func namesOf(c *x509.Certificate) certNames {
	n := certNames{dns: c.DNSNames, emails: c.EmailAddresses, cn: c.Subject.CommonName}
	for _, u := range c.URIs {
		n.uris = append(n.uris, u.String())
	}
	return n
}

// dnsLike are the names DNS rules apply to: DNS SANs, then the CN.
func (n certNames) dnsLike() []string {
	if n.cn == "" {
		return n.dns
	}
	return append(append([]string(nil), n.dns...), n.cn)
}

// display is what logs and the page call an unlisted caller: its most
// specific name.
func (n certNames) display() string {
	for _, l := range [][]string{n.uris, n.dns, n.emails, {n.cn}} {
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
