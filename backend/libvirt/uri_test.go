package libvirt

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// TestValidateURILibvirtRules: the bypasses of a check that read the query
// the way Go does (case-sensitive, first value) instead of the way libvirt
// does (any case, last value, ';' as a separator, escapes decoded).
func TestValidateURILibvirtRules(t *testing.T) {
	t.Parallel()
	for uri, bad := range map[string]string{
		"qemu+tls://h/system?NO_VERIFY=1":                                            "no_verify=1",
		"qemu+tls://h/system?No_Verify=1":                                            "no_verify=1",
		"qemu+tls://h/system?no_verify=0&no_verify=1":                                "more than once",
		"qemu+tls://h/system?no_verify=0&NO_VERIFY=1":                                "more than once",
		"qemu+tls://h/system?no_verify=0;no_verify=1":                                "more than once",
		"qemu+tls://h/system?pkipath=/p;no_verify=1":                                 "no_verify=1",
		"qemu+tls://h/system?no%5Fverify=1":                                          "no_verify=1",
		"qemu+tls://h/system?no_verify=+1":                                           "no_verify= 1",
		"qemu+tls://h/system?no_verify=-1":                                           "no_verify=-1",
		"qemu+tls://h/system?no_verify=01":                                           "no_verify=01",
		"qemu+libssh://h/system?Known_Hosts_Verify=ignore":                           "known_hosts_verify=ignore",
		"qemu+libssh://h/system?known_hosts_verify=normal&known_hosts_verify=ignore": "more than once",
		"qemu+ssh://h/system?known_hosts_verify=Auto":                                "known_hosts_verify=auto",
		"qemu+ssh://h/system?known_hosts_verify=":                                    "known_hosts_verify=",
		"qemu+ext:///system?command=/bin/sh":                                         "ext transport",
		"qemu+EXT:///system":                                                         "ext transport",
		"qemu+ssh://h/system?command=/tmp/evil":                                      "command=",
		"qemu+libssh://h/system?COMMAND=/tmp/evil":                                   "command=",
		"qemu+tcp://h/system":                                                        "tcp transport",
		"qemu+vsock://2/system":                                                      `transport "vsock" is not allowed`,
		"qemu+tls://h/system?pkipath=%zz":                                            "bad escape",
	} {
		t.Run(uri, func(t *testing.T) {
			t.Parallel()
			err := ValidateURI(uri)
			if err == nil || !strings.Contains(err.Error(), bad) || !strings.HasPrefix(err.Error(), "--connect: ") {
				t.Fatalf("err = %v, want --connect: ...%s", err, bad)
			}
		})
	}
	for _, ok := range []string{
		"qemu+tls://h/system?no_verify=0",
		"qemu+libssh://h/system?KNOWN_HOSTS_VERIFY=Normal&keyfile=/k&known_hosts=/kh",
		"qemu+unix:///system?socket=/run/libvirt/libvirt-sock;mode=legacy",
		"qemu+libssh2://root@h/system?sshauth=privkey",
		"qemu:///session",
	} {
		if err := ValidateURI(ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
}

// libvirtVerdict is a model of how libvirt's remote driver reads a URI,
// written independently of ValidateURI: parameters split on & and ;,
// names compared without case, the last occurrence wins, integers read
// with C's atoi. It reports whether the connection would verify its peer
// and run no local command.
func libvirtVerdict(raw string) (safe bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	_, transport, _ := strings.Cut(strings.ToLower(u.Scheme), "+")
	if transport == "tcp" || transport == "ext" || strings.HasPrefix(strings.ToLower(u.Scheme), "tcp") {
		return false
	}
	last := map[string]string{}
	for _, item := range strings.FieldsFunc(u.RawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		n, v, _ := strings.Cut(item, "=")
		n, err1 := url.QueryUnescape(n)
		v, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			return false
		}
		last[strings.ToLower(n)] = v
	}
	if v, ok := last["no_verify"]; ok && atoi(v) != 0 {
		return false
	}
	if v, ok := last["known_hosts_verify"]; ok && !strings.EqualFold(v, "normal") {
		return false
	}
	_, cmd := last["command"]
	return !cmd
}

// atoi is C's: leading blanks, an optional sign, digits up to the first
// non-digit; 0 when there are none.
func atoi(s string) int {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	end := 0
	if end < len(s) && (s[end] == '+' || s[end] == '-') {
		end++
	}
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(s[:end])
	return n
}

// FuzzValidateURI: whatever ValidateURI accepts, libvirt would connect to
// with verification on and no local command.
func FuzzValidateURI(f *testing.F) {
	for _, s := range []string{
		"qemu+tls://h/system?no_verify=0", "qemu+tls://h/system?NO_VERIFY=1", "qemu+ssh://h/system?known_hosts_verify=normal",
		"qemu+libssh://h/system?a=1;no_verify=1", "qemu+ext:///system?command=x", "qemu:///system", "qemu+tls://h/s?no%5fverify=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if ValidateURI(raw) == nil && !libvirtVerdict(raw) {
			t.Fatalf("accepted %q, which libvirt would open without verification (or with a local command)", raw)
		}
	})
}
