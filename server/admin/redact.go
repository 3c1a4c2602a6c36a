package admin

import (
	"net/url"
	"strings"
)

// RedactURI removes what may carry a credential from a libvirt connection
// URI before it leaves the process: the userinfo (user and password), the
// query string (keyfile, pkipath, known_hosts and friends) and the
// fragment. Backends already report redacted URIs; this is the admin API's
// own guarantee, so a backend that forgets cannot leak through it.
func RedactURI(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		// Not parseable: keep only what is certainly not a secret, the
		// scheme and the part after the last '@', before any '?' or '#'.
		s := raw
		if i := strings.IndexAny(s, "?#"); i >= 0 {
			s = s[:i]
		}
		scheme := ""
		if i := strings.Index(s, "://"); i >= 0 {
			scheme, s = s[:i+3], s[i+3:]
		}
		if i := strings.LastIndex(s, "@"); i >= 0 {
			s = s[i+1:]
		}
		return scheme + s
	}
	u.User = nil
	u.RawQuery = ""
	u.ForceQuery = false
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}
