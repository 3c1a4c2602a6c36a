package config

import (
	"net/url"
	"path/filepath"
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
		// tls_priority: TLS 1.3 only, no NULL, nothing added but TLS 1.3.
		"qemu+tls://h/system?tls_priority=NORMAL":                                              "tls_priority must be TLS 1.3 only",
		"qemu+tls://h/system?tls_priority=NORMAL:-VERS-ALL:%2BVERS-TLS1.3:%2BVERS-TLS1.2":      "tls_priority must be TLS 1.3 only",
		"qemu+tls://h/system?tls_priority=NORMAL:%2BVERS-TLS1.2:-VERS-ALL":                     "tls_priority must be TLS 1.3 only",
		"qemu+tls://h/system?tls_priority=NORMAL:-VERS-ALL:%2BVERS-TLS1.3:%2BVERS-SSL3.0":      "tls_priority must be TLS 1.3 only",
		"qemu+tls://h/system?tls_priority=NORMAL:-VERS-ALL:%2BVERS-TLS1.3:%2BVERS-TLS1.0":      "tls_priority must be TLS 1.3 only",
		"qemu+tls://h/system?tls_priority=NORMAL:-VERS-ALL:%2BVERS-TLS1.3:%2BNULL":             "NULL",
		"qemu+tls://h/system?tls_priority=NORMAL:-VERS-ALL:%2BVERS-TLS1.3:%2Bnull":             "NULL",
		"qemu+tls://h/system?tls_priority=NONE:%2BVERS-TLS1.3:%2BAES-128-GCM":                  "tls_priority must be TLS 1.3 only",
		"qemu+tls://h/system?tls_priority=NONE:-VERS-ALL:%2BVERS-TLS1.3":                       "tls_priority must be TLS 1.3 only",
		"qemu+tls://h/system?tls_priority=@SYSTEM:-VERS-ALL:%2BVERS-TLS1.3":                    "tls_priority must be TLS 1.3 only",
		"qemu+tls://h/system?tls_priority=NORMAL:-VERS-ALL:%2BVERS-TLS1.3:%25COMPAT":           "tls_priority must be TLS 1.3 only",
		"qemu+tls://h/system?tls_priority=NORMAL:-VERS-ALL:%2BVERS-TLS1.3:%2BANON-ECDH":        "tls_priority must be TLS 1.3 only",
		"qemu+tls://h/system?tls_priority=NORMAL:-VERS-ALL:%2BVERS-TLS1.3:VERS-TLS1.2":         "tls_priority must be TLS 1.3 only",
		"qemu+tls://h/system?tls_priority=NORMAL:-VERS-ALL:%2BVERS-TLS1.3;tls_priority=NORMAL": "more than once",
		"qemu+tls://h/system?TLS_PRIORITY=NORMAL":                                              "tls_priority must be TLS 1.3 only",
		"qemu+tls://h/system?tls_priority=NORMAL:-VERS-ALL:+VERS-TLS1.3":                       "write it as %2B",
		"qemu+tls://h/system?tls_priority=":                                                    "tls_priority must be TLS 1.3 only",
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
		"qemu+tls://h/system?tls_priority=NORMAL:-VERS-ALL:%2BVERS-TLS1.3",
		"qemu+tls://h/system?tls_priority=SECURE256:-VERS-ALL:%2BVERS-TLS1.3",
		"qemu+tls://h/system?tls_priority=SECURE128:-VERS-ALL:%2BVERS-TLS1.3:-AES-128-GCM:!CHACHA20-POLY1305",
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
	if v, ok := last["tls_priority"]; ok && !tls13Only(v) {
		return false
	}
	_, cmd := last["command"]
	return !cmd
}

// tls13Only models a GnuTLS priority string pessimistically: the base
// keyword may enable every version, each token adds or removes versions,
// and anything else that adds (a "+" or bare token, a "%" or "@"
// directive) or names NULL might weaken the connection.
func tls13Only(v string) bool {
	toks := strings.Split(v, ":")
	switch toks[0] {
	case "NORMAL", "PFS", "SECURE128", "SECURE192", "SECURE256", "PERFORMANCE":
	default:
		return false
	}
	vers := map[string]bool{"SSL3.0": true, "TLS1.0": true, "TLS1.1": true, "TLS1.2": true, "TLS1.3": true}
	for _, t := range toks[1:] {
		switch {
		case strings.Contains(strings.ToUpper(t), "NULL"):
			return false
		case t == "-VERS-ALL" || t == "!VERS-ALL" || t == "-VERS-TLS-ALL":
			clear(vers)
		case strings.HasPrefix(t, "+VERS-"):
			vers[strings.TrimPrefix(t, "+VERS-")] = true
		case strings.HasPrefix(t, "-") || strings.HasPrefix(t, "!"):
			delete(vers, strings.TrimPrefix(t[1:], "VERS-"))
		default:
			return false
		}
	}
	for v := range vers {
		if v != "TLS1.3" {
			return false
		}
	}
	return true
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
// with verification on, no local command and TLS 1.3 only if tls_priority
// is given.
func FuzzValidateURI(f *testing.F) {
	for _, s := range []string{
		"qemu+tls://h/system?no_verify=0", "qemu+tls://h/system?NO_VERIFY=1", "qemu+ssh://h/system?known_hosts_verify=normal",
		"qemu+libssh://h/system?a=1;no_verify=1", "qemu+ext:///system?command=x", "qemu:///system", "qemu+tls://h/s?no%5fverify=1",
		"qemu+tls://h/s?tls_priority=NORMAL:-VERS-ALL:%2BVERS-TLS1.3", "qemu+tls://h/s?tls_priority=NORMAL:-VERS-ALL:%2BVERS-TLS1.3:-VERS-TLS1.3",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if ValidateURI(raw) == nil && !libvirtVerdict(raw) {
			t.Fatalf("accepted %q, which libvirt would open without verification (or with a local command)", raw)
		}
	})
}

// TestValidateURICredentialsDir: with --credentials-dir, the parameters
// that name credentials must stay inside it, however they are spelled;
// messages name the parameter and the flag and never show the value.
func TestValidateURICredentialsDir(t *testing.T) {
	t.Parallel()
	const dir = "/etc/bigfleet/libvirt-ssh"
	for _, tc := range []struct{ uri, bad string }{
		{"qemu+libssh://h/system?keyfile=/etc/bigfleet/libvirt-ssh/id&known_hosts=/etc/bigfleet/libvirt-ssh/known_hosts", ""},
		{"qemu+tls://h/system?pkipath=/etc/bigfleet/libvirt-ssh", ""},
		{"qemu+tls://h/system?pkipath=/etc/bigfleet/libvirt-ssh/", ""},
		{"qemu+libssh://h/system?keyfile=/etc/bigfleet/libvirt-ssh//./id", ""},
		{"qemu+libssh://h/system?keyfile=/etc/bigfleet/libvirt-ssh/..data/id", ""}, // a Secret volume's own layout
		{"qemu+libssh://h/system", ""},
		{"qemu:///system?socket=/run/libvirt/libvirt-sock", ""},
		{"qemu+libssh://h/system?keyfile=/root/.ssh/id_ed25519", "keyfile is outside --credentials-dir"},
		{"qemu+libssh://h/system?KEYFILE=/root/.ssh/id_ed25519", "keyfile is outside --credentials-dir"},
		{"qemu+libssh://h/system?known_hosts=/etc/ssh/ssh_known_hosts", "known_hosts is outside --credentials-dir"},
		{"qemu+tls://h/system?pkipath=/etc/pki/libvirt", "pkipath is outside --credentials-dir"},
		{"qemu+tls://h/system?pkipath=/etc/bigfleet", "pkipath is outside --credentials-dir"},
		{"qemu+tls://h/system?pkipath=/etc/bigfleet/libvirt-ssh-evil", "pkipath is outside --credentials-dir"},
		{"qemu+libssh://h/system?keyfile=/etc/bigfleet/libvirt-ssh/../libvirt-pki/clientkey.pem", `keyfile must not contain ".."`},
		{"qemu+libssh://h/system?keyfile=/etc/bigfleet/libvirt-ssh/%2E%2E/x", `keyfile must not contain ".."`},
		{"qemu+libssh://h/system?keyfile=/etc/bigfleet/libvirt-ssh/a/../id", `keyfile must not contain ".."`},
		{"qemu+libssh://h/system?keyfile=id", "keyfile must be an absolute path inside --credentials-dir"},
		{"qemu+libssh://h/system?keyfile=libvirt-ssh/id", "keyfile must be an absolute path inside --credentials-dir"},
		{"qemu+libssh://h/system?keyfile=~/.ssh/id", "keyfile must be an absolute path inside --credentials-dir"},
		{"qemu+libssh://h/system?keyfile=", "keyfile must be an absolute path inside --credentials-dir"},
		{"qemu+libssh://h/system?keyfile=/etc/bigfleet/libvirt-ssh/id%00", "keyfile contains a control character"},
		{"qemu+libssh://h/system?known_hosts=/etc/bigfleet/libvirt-ssh/kh;known_hosts=/tmp/kh", "more than once"},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			t.Parallel()
			err := ValidateURIIn(tc.uri, dir)
			if tc.bad == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.bad) || !strings.HasPrefix(err.Error(), "--connect: ") {
				t.Fatalf("err = %v, want --connect: ...%s", err, tc.bad)
			}
			if _, q, _ := strings.Cut(tc.uri, "?"); strings.Contains(err.Error(), q) || strings.Contains(err.Error(), "?") {
				t.Errorf("error shows the query: %v", err)
			}
			if err := ValidateURI(tc.uri); err != nil && !strings.Contains(tc.bad, "more than once") {
				t.Errorf("refused without --credentials-dir: %v", err)
			}
		})
	}
	if err := ValidateURIIn("qemu+libssh://h/system?keyfile=/anywhere/id", "/"); err != nil {
		t.Errorf("--credentials-dir / refused an absolute path: %v", err)
	}
}

// FuzzValidateURIIn: whatever ValidateURIIn accepts names its credentials
// (the last pkipath, keyfile and known_hosts, as libvirt reads them) at
// absolute paths that filepath.Rel places inside the directory, with no
// NUL to cut them short.
func FuzzValidateURIIn(f *testing.F) {
	const dir = "/etc/bigfleet/creds"
	for _, s := range []string{
		"qemu+libssh://h/system?keyfile=/etc/bigfleet/creds/id", "qemu+tls://h/s?pkipath=/etc/bigfleet/creds/../../../etc",
		"qemu+tls://h/s?PKIPATH=/etc/bigfleet/credsx", "qemu+libssh://h/s?known_hosts=/etc/bigfleet/creds/kh%00/../../x",
		"qemu+libssh://h/s?keyfile=/etc/bigfleet/creds/a;keyfile=/b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if ValidateURIIn(raw, dir) != nil {
			return
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("accepted unparseable %q", raw)
		}
		last := map[string]string{}
		for _, item := range strings.FieldsFunc(u.RawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
			n, v, _ := strings.Cut(item, "=")
			n, _ = url.QueryUnescape(n)
			v, _ = url.QueryUnescape(v)
			last[strings.ToLower(n)] = v
		}
		for _, p := range []string{"pkipath", "keyfile", "known_hosts"} {
			v, ok := last[p]
			if !ok {
				continue
			}
			if i := strings.IndexByte(v, 0); i >= 0 {
				t.Fatalf("accepted %s with a NUL in %q", p, raw)
			}
			rel, err := filepath.Rel(dir, v)
			if !filepath.IsAbs(v) || err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				t.Fatalf("accepted %s=%q outside %s", p, v, dir)
			}
		}
	})
}
