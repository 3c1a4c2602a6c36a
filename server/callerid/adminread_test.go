package callerid

import (
	"strings"
	"testing"
)

// TestDecideAdminRead: the admin service's reads are for
// bigfleet://admin and bigfleet://readonly, and for certificates the
// operator listed for writes unless they carry several or a malformed
// BigFleet identity; a shard, no certificate and no BigFleet identity are
// refused, each with its reason and CapacityProvider's message shape.
func TestDecideAdminRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cert   bool
		id     Identity
		listed bool
		want   Reason // "" allowed
	}{
		{"admin", true, Identity{Role: RoleAdmin, SANs: []string{"bigfleet://admin"}}, false, ""},
		{"readonly", true, Identity{Role: RoleReadonly, SANs: []string{"bigfleet://readonly"}}, false, ""},
		{"shard", true, Identity{Role: RoleShard, Shard: "s1", SANs: []string{"bigfleet://shard/s1"}}, false, ReasonNotOperator},
		{"listed shard", true, Identity{Role: RoleShard, Shard: "s1", SANs: []string{"bigfleet://shard/s1"}}, true, ""},
		{"no SAN", true, Identity{}, false, ReasonNoSAN},
		{"listed, no SAN", true, Identity{}, true, ""},
		{"several", true, Identity{Role: RoleSeveral, SANs: []string{"bigfleet://admin", "bigfleet://readonly"}}, true, ReasonSeveral},
		{"malformed", true, Identity{Role: RoleMalformed, SANs: []string{"bigfleet://root"}}, true, ReasonMalformed},
		{"no certificate", false, Identity{}, false, ReasonNoCertificate},
	} {
		r := DecideAdminRead("ListFenceMarks", tc.cert, tc.id, tc.listed)
		switch {
		case tc.want == "" && r != nil:
			t.Errorf("%s: refused %+v", tc.name, r)
		case tc.want != "" && (r == nil || r.Reason != tc.want):
			t.Errorf("%s: %+v; want reason %s", tc.name, r, tc.want)
		case r != nil && !strings.HasPrefix(r.Msg, "caller identity: ListFenceMarks needs a URI SAN bigfleet://admin or bigfleet://readonly"):
			t.Errorf("%s: message %q", tc.name, r.Msg)
		}
	}
}
