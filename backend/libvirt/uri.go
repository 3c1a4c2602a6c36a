package libvirt

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"libvirt.org/go/libvirt"
)

// transports is the allow-list of libvirt transports (the part after '+'
// in the scheme; "" is the default: local unix socket, or tls with a host).
// tcp (no encryption) and ext (runs a local command) are not on it.
var transports = map[string]bool{"": true, "unix": true, "tls": true, "libssh": true, "libssh2": true, "ssh": true}

// ValidateURI refuses libvirt URIs whose transport is not on the allow-list
// or whose parameters would switch peer verification off, judged by
// libvirt's own rules rather than Go's (see libvirtParams):
//   - a transport other than unix, tls, libssh, libssh2 or ssh (tcp is
//     unencrypted, ext runs an arbitrary local command);
//   - no_verify with any value but 0 (TLS or SSH without verification);
//   - known_hosts_verify other than normal (auto adds unknown keys, ignore
//     accepts any);
//   - command= (the ssh transports run it as the local ssh binary);
//   - any parameter given twice, whatever its case: libvirt uses the last,
//     a reader of the URI sees the first.
//
// Messages name the flag and show the URI redacted.
func ValidateURI(raw string) error {
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
		if err := checkParam(p); err != nil {
			return fmt.Errorf("--connect: %s: %w", shown, err)
		}
	}
	return nil
}

// checkParam judges one parameter (name already lowercased).
func checkParam(p uriParam) error {
	switch p.Name {
	case "no_verify":
		if p.Value != "0" {
			return fmt.Errorf("no_verify=%s disables peer verification and is refused", shortValue(p.Value))
		}
	case "known_hosts_verify":
		if v := strings.ToLower(p.Value); v != "normal" {
			return fmt.Errorf("known_hosts_verify=%s does not verify the host key and is refused; use normal with a known_hosts file", shortValue(v))
		}
	case "command":
		return errors.New("command= runs a local program in place of ssh and is refused")
	}
	return nil
}

// shortValue keeps a quoted URI value short in a message.
func shortValue(v string) string { return truncate(v, 16) }

// uriParam is one query parameter as libvirt sees it.
type uriParam struct{ Name, Value string }

// libvirtParams splits a query the way libvirt's virURIParseParams does
// (see splitParams). The remote driver then matches names
// case-insensitively and lets the last occurrence win, so names are
// lowercased here and a repeated name is an error: its meaning would depend
// on which reader you ask.
func libvirtParams(rawQuery string) ([]uriParam, error) {
	params, err := splitParams(rawQuery)
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

// splitParams splits on '&' and ';' and percent-decodes each name and
// value, '+' being a space, as libvirt does.
func splitParams(rawQuery string) ([]uriParam, error) {
	var out []uriParam
	for _, item := range strings.FieldsFunc(rawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		rawName, rawValue, _ := strings.Cut(item, "=")
		name, err := url.QueryUnescape(rawName)
		if err != nil {
			return nil, fmt.Errorf("query parameter name %q: bad escape", shortValue(rawName))
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return nil, fmt.Errorf("query parameter %q: bad escape in its value", shortValue(name))
		}
		out = append(out, uriParam{Name: name, Value: value})
	}
	return out, nil
}

// Redact shows a libvirt URI without userinfo, query string or fragment:
// the query may name key files, known_hosts paths or sockets, the userinfo a
// login. What remains (scheme, host, path) is enough to tell hosts apart.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "<unparseable URI>"
	}
	if u.Opaque != "" {
		return u.Scheme + ":…"
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return r.String()
}

// secrets lists the substrings of a raw URI that must never be shown: the
// URI itself, its userinfo and its query values.
func secrets(raw string) []string {
	out := []string{raw}
	u, err := url.Parse(raw)
	if err != nil {
		return out
	}
	if u.User != nil {
		out = append(out, u.User.String(), u.User.Username())
	}
	if u.RawQuery != "" {
		out = append(out, u.RawQuery)
	}
	params, _ := splitParams(u.RawQuery)
	for _, p := range params {
		if len(p.Value) >= 3 { // shorter values ("1", "0") are no secret and too common to scrub
			out = append(out, p.Value)
		}
	}
	return out
}

// scrubbed is an error whose text had URI secrets removed; errors.Is/As still
// reach the original (a libvirt.Error keeps its code for classification).
type scrubbed struct {
	msg   string
	cause error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.cause }

// scrub removes the secrets of raw from err's text (libvirt quotes the URI,
// socket paths or key files in some connection errors) and shows a libvirt
// error by its message instead of the Go binding's "virError(Code=..)" dump.
func scrub(err error, raw string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	changed := false
	var le libvirt.Error
	if errors.As(err, &le) && le.Message != "" && strings.Contains(msg, le.Error()) {
		msg = strings.Replace(msg, le.Error(), le.Message, 1)
		changed = true
	}
	for _, s := range secrets(raw) {
		if s != "" && strings.Contains(msg, s) {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
			changed = true
		}
	}
	if !changed {
		return err
	}
	return &scrubbed{msg: msg, cause: err}
}
