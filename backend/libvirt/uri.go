package libvirt

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"libvirt.org/go/libvirt"
)

// ValidateURI refuses libvirt URIs whose transport is unauthenticated or
// skips verifying the peer:
//   - the tcp transport (qemu+tcp://, tcp://): no encryption, weak auth;
//   - SSH transports (ssh, libssh, libssh2) with known_hosts_verify=auto or
//     ignore: the host key is accepted blindly (auto adds unknown keys);
//   - no_verify=1 on any transport: TLS or SSH without peer verification.
//
// Messages name the flag and show the URI redacted.
func ValidateURI(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return fmt.Errorf("--connect: %q is not a libvirt URI", Redact(raw))
	}
	shown := Redact(raw)
	driver, transport, _ := strings.Cut(strings.ToLower(u.Scheme), "+")
	if transport == "tcp" || driver == "tcp" {
		return fmt.Errorf("--connect: %s: the tcp transport is unencrypted and refused; use qemu+tls:// or qemu+libssh://", shown)
	}
	q := u.Query()
	if v := q.Get("no_verify"); v != "" && v != "0" {
		return fmt.Errorf("--connect: %s: no_verify=%s disables peer verification and is refused", shown, v)
	}
	switch transport {
	case "ssh", "libssh", "libssh2":
		switch v := strings.ToLower(q.Get("known_hosts_verify")); v {
		case "auto", "ignore":
			return fmt.Errorf("--connect: %s: known_hosts_verify=%s does not verify the host key and is refused; use normal with a known_hosts file", shown, v)
		}
	}
	return nil
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
	for _, vs := range u.Query() {
		for _, v := range vs {
			if len(v) >= 3 { // shorter values ("1", "0") are no secret and too common to scrub
				out = append(out, v)
			}
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
