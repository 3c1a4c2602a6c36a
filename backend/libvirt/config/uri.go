package config

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// transports is the allow-list of libvirt transports (the part after '+'
// in the scheme; "" is the default: local unix socket, or tls with a host).
// tcp (no encryption) and ext (runs a local command) are not on it.
var transports = map[string]bool{"": true, "unix": true, "tls": true, "libssh": true, "libssh2": true, "ssh": true}

// ValidateURI refuses libvirt URIs whose transport is not on the allow-list
// or whose parameters would weaken the connection, judged by libvirt's own
// rules rather than Go's (see libvirtParams):
//   - a transport other than unix, tls, libssh, libssh2 or ssh (tcp is
//     unencrypted, ext runs an arbitrary local command);
//   - any parameter given twice, whatever its case: libvirt uses the last,
//     a reader of the URI sees the first;
//   - a parameter paramRules refuses (no_verify, known_hosts_verify,
//     command, tls_priority).
//
// Messages name the flag and show the URI redacted.
func ValidateURI(raw string) error { return validateURI(raw, uriPolicy{}) }

// ValidateURIIn is ValidateURI with a --credentials-dir: pkipath, keyfile
// and known_hosts must then name paths inside dir (see credPath). dir must
// be absolute and clean (Config.Validate checks it).
func ValidateURIIn(raw, dir string) error { return validateURI(raw, uriPolicy{credDir: dir}) }

// uriPolicy is what the rules need beyond the URI itself.
type uriPolicy struct {
	credDir string // --credentials-dir; "" puts no bound on credential paths
}

func validateURI(raw string, pol uriPolicy) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return fmt.Errorf("--connect: %q is not a libvirt URI", Redact(raw))
	}
	shown := Redact(raw)
	driver, transport, _ := strings.Cut(strings.ToLower(u.Scheme), "+")
	switch {
	case transport == "tcp" || driver == "tcp":
		return fmt.Errorf("--connect: %s: the tcp transport is unencrypted and refused; use qemu+tls:// or qemu+libssh://", shown)
	case transport == "ext":
		return fmt.Errorf("--connect: %s: the ext transport runs an arbitrary local command and is refused", shown)
	case !transports[transport]:
		return fmt.Errorf("--connect: %s: transport %q is not allowed; use unix, tls, libssh, libssh2 or ssh", shown, transport)
	}
	params, err := libvirtParams(u.RawQuery)
	if err != nil {
		return fmt.Errorf("--connect: %s: %w", shown, err)
	}
	for _, p := range params {
		if rule := paramRules[p.Name]; rule != nil {
			if err := rule(pol, p.Value); err != nil {
				return fmt.Errorf("--connect: %s: %w", shown, err)
			}
		}
	}
	return nil
}

// paramRule judges the value of one query parameter.
type paramRule func(pol uriPolicy, value string) error

// paramRules are the parameters libvirt's remote driver acts on that can
// weaken a connection or reach for credentials, by lowercased name.
var paramRules = map[string]paramRule{
	"no_verify": func(_ uriPolicy, v string) error {
		if v != "0" {
			return fmt.Errorf("no_verify=%s disables peer verification and is refused", shortValue(v))
		}
		return nil
	},
	"known_hosts_verify": func(_ uriPolicy, v string) error {
		if v := strings.ToLower(v); v != "normal" {
			return fmt.Errorf("known_hosts_verify=%s does not verify the host key and is refused; use normal with a known_hosts file", shortValue(v))
		}
		return nil
	},
	"command": func(uriPolicy, string) error {
		return errors.New("command= runs a local program in place of ssh and is refused")
	},
	"tls_priority": func(_ uriPolicy, v string) error { return checkTLSPriority(v) },
	"pkipath":      credPath("pkipath"),
	"keyfile":      credPath("keyfile"),
	"known_hosts":  credPath("known_hosts"),
}

// tlsPriorityBases are the GnuTLS keywords a tls_priority may start from.
// Not NONE (then every algorithm is the string's to add), LEGACY, or
// @SYSTEM/@KEYWORD (their meaning lives in a host's config file).
var tlsPriorityBases = []string{"NORMAL", "PFS", "SECURE128", "SECURE192", "SECURE256"}

// tlsRemoval is a GnuTLS token that only takes something away ("-NAME" or
// "!NAME"), which can make a handshake fail but never weaker.
var tlsRemoval = regexp.MustCompile(`^[-!][A-Z0-9][A-Z0-9.-]*$`)

// checkTLSPriority allows a tls_priority only in the form
// BASE:-VERS-ALL:+VERS-TLS1.3[:-NAME...]: whatever versions BASE enables,
// -VERS-ALL drops them and only TLS 1.3 is added back; later tokens may
// only remove. That refuses SSL 3.0 and TLS 1.0-1.2, NULL ciphers, "%"
// overrides (%COMPAT, %UNSAFE_RENEGOTIATION, ...) and additions such as
// +ANON-ECDH (no peer authentication), without modelling all of GnuTLS's
// priority syntax: an unfamiliar string is refused rather than guessed at.
func checkTLSPriority(v string) error {
	if strings.Contains(strings.ToUpper(v), "NULL") {
		return errors.New("tls_priority names NULL (no encryption) and is refused")
	}
	toks := strings.Split(v, ":")
	ok := len(toks) >= 3 && slices.Contains(tlsPriorityBases, toks[0]) &&
		toks[1] == "-VERS-ALL" && toks[2] == "+VERS-TLS1.3"
	for _, t := range toks[min(3, len(toks)):] {
		ok = ok && tlsRemoval.MatchString(t)
	}
	if ok {
		return nil
	}
	hint := ""
	if strings.Contains(v, " ") {
		// libvirt, like a form, decodes '+' in a query as a space.
		hint = ` ("+" in a URI query is a space to libvirt: write it as %2B)`
	}
	return fmt.Errorf("tls_priority must be TLS 1.3 only, as BASE:-VERS-ALL:+VERS-TLS1.3 (BASE one of %s), "+
		"optionally followed by removals (:-NAME); refused%s", strings.Join(tlsPriorityBases, ", "), hint)
}

// credPath is the rule of a parameter naming a credential file or
// directory: with a --credentials-dir it must lie inside it, so the
// provider reads credentials only from the mounted Secret. The check is
// lexical (no symlinks followed): a Kubernetes Secret volume is itself
// symlinks into "..data", and what the directory holds is the operator's.
// Messages never show the value.
func credPath(param string) paramRule {
	return func(pol uriPolicy, v string) error {
		dir := pol.credDir
		if dir == "" {
			return nil
		}
		switch {
		case strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }):
			// libvirt reads a C string: a NUL would cut the path short.
			return fmt.Errorf("%s contains a control character; refused (--credentials-dir %s)", param, dir)
		case !filepath.IsAbs(v):
			return fmt.Errorf("%s must be an absolute path inside --credentials-dir %s; refused", param, dir)
		case slices.Contains(strings.Split(v, "/"), ".."):
			return fmt.Errorf(`%s must not contain ".."; refused (--credentials-dir %s)`, param, dir)
		case !inside(filepath.Clean(v), dir):
			return fmt.Errorf("%s is outside --credentials-dir %s; refused", param, dir)
		}
		return nil
	}
}

// inside reports whether the clean absolute path p is dir or below it.
func inside(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// shortValue keeps a quoted URI value short in a message.
func shortValue(v string) string { return truncate(v, 16) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// libvirtParams splits a query the way libvirt's virURIParseParams does
// (see virt.SplitQuery). The remote driver then matches names
// case-insensitively and lets the last occurrence win, so names are
// lowercased here and a repeated name is an error: its meaning would depend
// on which reader you ask.
func libvirtParams(rawQuery string) ([]virt.Param, error) {
	params, err := virt.SplitQuery(rawQuery)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i := range params {
		params[i].Name = strings.ToLower(params[i].Name)
		if seen[params[i].Name] {
			return nil, fmt.Errorf("query parameter %q is given more than once (libvirt would use the last); refused", shortValue(params[i].Name))
		}
		seen[params[i].Name] = true
	}
	return params, nil
}

// Redact shows a libvirt URI without userinfo, query string or fragment
// (virt.Redact): what remains is enough to tell hosts apart.
func Redact(raw string) string { return virt.Redact(raw) }
