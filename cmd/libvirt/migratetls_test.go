package main

import "testing"

// Live migration is encrypted unless --migrate-tls=false says otherwise:
// no flag, no other setting reaches the plain stream.
func TestMigrateTLSDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		tls  bool
	}{{nil, true}, {[]string{"--migrate-tls"}, true}, {[]string{"--migrate-tls=false"}, false}} {
		var c config
		if err := newFlagSet(&c).Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if c.MigrateTLS != tc.tls {
			t.Errorf("%v: MigrateTLS %v, want %v", tc.args, c.MigrateTLS, tc.tls)
		}
	}
}
