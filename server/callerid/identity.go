// Package callerid binds each CapacityProvider call to the caller's verified
// client certificate, as BigFleet's ADR-0048 and ADR-0060 require under
// mTLS: a shard may mutate only with its own shard_id, dashboards and admin
// tooling may only read. The provider is where this is enforced (ADR-0005):
// any certificate the CA signed would otherwise act as any shard, delete its
// machines and move its fence marks.
//
// The check runs as the CapacityProvider handler's innermost interceptor,
// before the engine and so before the fence: a refused call changes no
// record and moves no mark.
package callerid

import (
	"crypto/x509"
	"net/url"
	"strings"
)

// Role is what a certificate's bigfleet:// URI SAN makes its holder.
type Role int

const (
	// RoleNone: no bigfleet:// URI SAN at all.
	RoleNone Role = iota
	// RoleShard: bigfleet://shard/<shard_id>.
	RoleShard
	// RoleReadonly: bigfleet://readonly (dashboards, CLIs, alerting).
	RoleReadonly
	// RoleAdmin: bigfleet://admin (bigfleetctl, operators' tooling).
	RoleAdmin
	// RoleSeveral: more than one bigfleet:// URI SAN (ADR-0048: exactly one).
	RoleSeveral
	// RoleMalformed: one bigfleet:// URI SAN that names no known role.
	RoleMalformed
)

func (r Role) String() string {
	switch r {
	case RoleShard:
		return "shard"
	case RoleReadonly:
		return "readonly"
	case RoleAdmin:
		return "admin"
	case RoleSeveral:
		return "several"
	case RoleMalformed:
		return "malformed"
	}
	return "none"
}

// Identity is a verified certificate's BigFleet identity.
type Identity struct {
	Role  Role
	Shard string // the shard id, for RoleShard
	// SANs are the certificate's bigfleet:// URI SANs, as presented: the
	// only part of a certificate a refusal may name (its other names,
	// subject and serial stay out of messages and logs).
	SANs []string
}

// Scheme is the URI scheme of BigFleet identities.
const Scheme = "bigfleet"

// Of reads c's BigFleet identity from its URI SANs. A URI SAN counts as a
// BigFleet one when its scheme is bigfleet in any case (RFC 3986 schemes
// are case-insensitive; Go's parser lowercases them), but only the exact
// forms ADR-0048 writes grant a role. DNS, e-mail and IP SANs
// and the subject never do: a DNS SAN that spells bigfleet://admin is a
// DNS name.
func Of(c *x509.Certificate) Identity {
	var id Identity
	var only *url.URL
	for _, u := range c.URIs {
		if !strings.EqualFold(u.Scheme, Scheme) {
			continue
		}
		id.SANs = append(id.SANs, u.String())
		only = u
	}
	switch len(id.SANs) {
	case 0:
		id.Role = RoleNone
	case 1:
		id.Role, id.Shard = roleOf(only)
	default:
		id.Role = RoleSeveral
	}
	return id
}

// roleOf parses one bigfleet:// URI: bigfleet://shard/<id>, bigfleet://readonly
// or bigfleet://admin, nothing more (no user, port, query or fragment, no
// trailing slash, lower case as ADR-0048 writes them).
func roleOf(u *url.URL) (Role, string) {
	if u.Scheme != Scheme || u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.ForceQuery ||
		u.Fragment != "" || u.RawFragment != "" || u.Port() != "" {
		return RoleMalformed, ""
	}
	switch u.Host {
	case "readonly":
		if u.Path == "" && u.RawPath == "" {
			return RoleReadonly, ""
		}
	case "admin":
		if u.Path == "" && u.RawPath == "" {
			return RoleAdmin, ""
		}
	case "shard":
		// The id is one path segment, compared byte for byte with the
		// request's shard_id. A percent-escape is refused rather than
		// decoded, so one id has one spelling on a certificate.
		shard, ok := strings.CutPrefix(u.Path, "/")
		if ok && shard != "" && u.EscapedPath() == u.Path && !strings.Contains(shard, "/") {
			return RoleShard, shard
		}
	}
	return RoleMalformed, ""
}
