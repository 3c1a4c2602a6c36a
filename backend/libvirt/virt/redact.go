package virt

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"libvirt.org/go/libvirt"
)

// A host's URI may name key files, known_hosts paths or sockets, and carry
// a login: it is shown only redacted, and every error that leaves a host is
// scrubbed of it.

// Param is one query parameter of a libvirt URI, as libvirt sees it.
type Param struct{ Name, Value string }

// SplitQuery splits a URI's query on '&' and ';' and percent-decodes each
// name and value, '+' being a space, as libvirt's virURIParseParams does.
func SplitQuery(rawQuery string) ([]Param, error) {
	var out []Param
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
		out = append(out, Param{Name: name, Value: value})
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
	params, _ := SplitQuery(u.RawQuery)
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

// Scrub removes the secrets of raw from err's text (libvirt quotes the URI,
// socket paths or key files in some connection errors) and shows a libvirt
// error by its message instead of the Go binding's "virError(Code=..)" dump.
func Scrub(err error, raw string) error {
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
	// Longest first: a short secret inside a longer one (the user name in
	// a key file's path) would otherwise break the longer one's match and
	// leave the rest of it in the message.
	ss := secrets(raw)
	slices.SortStableFunc(ss, func(a, b string) int { return len(b) - len(a) })
	for _, s := range ss {
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

// shortValue keeps a quoted URI value short in a message.
func shortValue(v string) string {
	if len(v) <= 16 {
		return v
	}
	return v[:16] + "…"
}
