package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseConnect(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, zone string
		want           []Host
		err            string
	}{
		{name: "bare uri", in: "qemu:///system", want: []Host{{Zone: "local", URI: "qemu:///system", Name: "local"}}},
		{name: "bare uri, default zone", in: "qemu:///system", zone: "eu1", want: []Host{{Zone: "eu1", URI: "qemu:///system", Name: "eu1"}}},
		{name: "bare uri with query", in: "qemu+libssh://h/system?keyfile=/k&known_hosts=/kh",
			want: []Host{{Zone: "local", URI: "qemu+libssh://h/system?keyfile=/k&known_hosts=/kh", Name: "local"}}},
		{name: "zone list", in: "a=qemu+tls://h1/system, b=qemu:///system",
			want: []Host{{Zone: "a", URI: "qemu+tls://h1/system", Name: "a"}, {Zone: "b", URI: "qemu:///system", Name: "b"}}},
		{name: "zone list with query", in: "a=qemu+libssh://h1/system?keyfile=/k",
			want: []Host{{Zone: "a", URI: "qemu+libssh://h1/system?keyfile=/k", Name: "a"}}},
		{name: "empty", in: " ", err: "--connect: empty"},
		{name: "malformed item", in: "a=qemu:///system,qemu+tls://h/system", err: "item 2 is not zone=uri"},
		{name: "empty uri", in: "a=", err: `zone "a" has an empty URI`},
		{name: "zone of two hosts", in: "a=qemu:///system,a=qemu+tls://kvm-a2.example:16514/system, b=qemu:///system",
			want: []Host{{Zone: "a", URI: "qemu:///system", Name: "a-system", Named: true},
				{Zone: "a", URI: "qemu+tls://kvm-a2.example:16514/system", Name: "kvm-a2.example-16514", Named: true},
				{Zone: "b", URI: "qemu:///system", Name: "b"}}},
		{name: "zone of two local sockets", in: "a=qemu:///system,a=qemu:///session?socket=/run/user/1001/libvirt/libvirt-sock",
			want: []Host{{Zone: "a", URI: "qemu:///system", Name: "a-system", Named: true},
				{Zone: "a", URI: "qemu:///session?socket=/run/user/1001/libvirt/libvirt-sock", Name: "a-run-user-1001-libvirt-libvirt-sock", Named: true}}},
		{name: "same host part twice", in: "a=qemu+ssh://u@h/system,a=qemu+ssh://v@h/session",
			want: []Host{{Zone: "a", URI: "qemu+ssh://u@h/system", Name: "h", Named: true},
				{Zone: "a", URI: "qemu+ssh://v@h/session", Name: "h-2", Named: true}}},
		{name: "duplicate zone and uri", in: "a=qemu:///system,a=qemu:///system", err: `zone "a" listed twice with the same URI`},
		{name: "bad zone name", in: "a.b-c_d=qemu:///system,-x=qemu:///system", err: `zone "-x"`},
		{name: "bad default zone", in: "qemu:///system", zone: "a/b", err: `zone "a/b"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseConnect(tc.in, tc.zone)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				if !strings.Contains(err.Error(), "--connect") && !strings.Contains(err.Error(), "--default-zone") {
					t.Errorf("error %q does not name the flag", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if !reflect.DeepEqual(got[i], tc.want[i]) {
					t.Errorf("host %d = %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestValidateURI(t *testing.T) {
	t.Parallel()
	tests := []struct {
		uri string
		bad string // substring of the error; "" means accepted
	}{
		{"qemu:///system", ""},
		{"qemu+unix:///system?socket=/run/x.sock", ""},
		{"qemu+tls://host.example/system?pkipath=/etc/pki/bf", ""},
		{"qemu+libssh://root@host/system?keyfile=/k&known_hosts=/kh", ""},
		{"qemu+ssh://host/system?known_hosts_verify=normal", ""},
		{"qemu+ssh://host/system", ""},
		{"test:///default", ""},
		{"qemu+tcp://host/system", "tcp transport"},
		{"QEMU+TCP://host/system", "tcp transport"},
		{"tcp://host/system", "tcp transport"},
		{"qemu+ssh://host/system?known_hosts_verify=auto", "known_hosts_verify=auto"},
		{"qemu+libssh://host/system?known_hosts_verify=ignore", "known_hosts_verify=ignore"},
		{"qemu+libssh2://host/system?known_hosts_verify=IGNORE", "known_hosts_verify=ignore"},
		{"qemu+ssh://host/system?no_verify=1", "no_verify=1"},
		{"qemu+tls://host/system?no_verify=1", "no_verify=1"},
		{"qemu+tls://host/system?no_verify=0", ""},
		{"not a uri", "not a libvirt URI"},
		{"", "not a libvirt URI"},
	}
	for _, tc := range tests {
		t.Run(tc.uri, func(t *testing.T) {
			t.Parallel()
			err := ValidateURI(tc.uri)
			if tc.bad == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.bad) || !strings.HasPrefix(err.Error(), "--connect: ") {
				t.Fatalf("err = %v, want --connect: ...%s", err, tc.bad)
			}
			if strings.Contains(err.Error(), "?") {
				t.Errorf("error shows a query string: %v", err)
			}
		})
	}
}

func TestValidateConfig(t *testing.T) {
	t.Parallel()
	good := func() Config {
		return Config{Hosts: []Host{{Zone: "a", URI: "qemu:///system"}}, Provider: "p", Image: "g.qcow2", Pool: "bigfleet"}
	}
	if err := func() *Config { c := good(); return &c }().Validate(); err != nil {
		t.Fatalf("good config refused: %v", err)
	}
	creds := t.TempDir()
	notDir := filepath.Join(creds, "id")
	if err := os.WriteFile(notDir, []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	inside := func() Config {
		c := good()
		c.CredentialsDir = creds + "/"
		c.Hosts[0].URI = "qemu+libssh://h/system?keyfile=" + creds + "/id&known_hosts=" + creds + "/known_hosts"
		return c
	}
	if c := inside(); c.Validate() != nil {
		t.Fatalf("credentials inside --credentials-dir refused: %v", c.Validate())
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no hosts", func(c *Config) { c.Hosts = nil }, "--connect"},
		{"dup zone and uri", func(c *Config) { c.Hosts = append(c.Hosts, Host{Zone: "a", URI: "qemu:///system"}) }, `zone "a" listed twice`},
		{"dup names", func(c *Config) {
			c.Hosts[0].Name = "h"
			c.Hosts = append(c.Hosts, Host{Zone: "b", URI: "test:///default", Name: "h"})
		}, `host name "h" used twice`},
		{"tcp", func(c *Config) { c.Hosts[0].URI = "qemu+tcp://h/system" }, "--connect"},
		{"no provider", func(c *Config) { c.Provider = "" }, "--provider"},
		{"nul provider", func(c *Config) { c.Provider = "a\x00b" }, "--provider"},
		{"no image", func(c *Config) { c.Image = "" }, "--image"},
		{"no pool", func(c *Config) { c.Pool = "" }, "--storage-pool"},
		{"initrd without kernel", func(c *Config) { c.Initrd = "/i" }, "--kernel"},
		{"missing user-data", func(c *Config) { c.BaseUserData = "/nonexistent/user-data" }, "--base-user-data"},
		{"weak tls_priority", func(c *Config) { c.Hosts[0].URI = "qemu+tls://h/system?tls_priority=NORMAL" }, "tls_priority"},
		{"relative credentials dir", func(c *Config) { c.CredentialsDir = "creds" }, "--credentials-dir"},
		{"missing credentials dir", func(c *Config) { c.CredentialsDir = "/nonexistent/creds" }, "--credentials-dir"},
		{"credentials dir is a file", func(c *Config) { c.CredentialsDir = notDir }, "--credentials-dir"},
		{"keyfile outside credentials dir", func(c *Config) {
			*c = inside()
			c.Hosts[0].URI = "qemu+libssh://h/system?keyfile=/root/.ssh/id"
		}, "keyfile is outside --credentials-dir"},
		{"a --hosts file host's pkipath outside credentials dir", func(c *Config) {
			*c = inside()
			c.Hosts = append(c.Hosts, Host{Zone: "a", URI: "qemu+tls://kvm-a2/system?pkipath=/etc/pki/libvirt", Name: "kvm-a2", Named: true, Enforce: true})
		}, "pkipath is outside --credentials-dir"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := good()
			tc.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
