package callerid

import (
	"fmt"
	"strconv"
	"strings"
)

// Reason is why a call was refused: the reason label of
// identity_rejected_total, so a small fixed set.
type Reason string

const (
	ReasonNoCertificate Reason = "no_certificate"  // no verified client certificate
	ReasonNoSAN         Reason = "no_bigfleet_san" // a certificate without a bigfleet:// URI SAN
	ReasonSeveral       Reason = "several_bigfleet_sans"
	ReasonMalformed     Reason = "malformed_bigfleet_san"
	ReasonReadOnly      Reason = "role_may_not_mutate" // readonly or admin calling a mutation
	ReasonEmptyShard    Reason = "empty_shard_id"
	ReasonShardMismatch Reason = "shard_mismatch"
	// ReasonNotOperator: a shard reading the admin service, which is for
	// bigfleet://admin and bigfleet://readonly only.
	ReasonNotOperator Reason = "role_may_not_read_admin"
)

// Reasons lists every Reason, for exporting zero counters.
var Reasons = []Reason{ReasonNoCertificate, ReasonNoSAN, ReasonSeveral, ReasonMalformed,
	ReasonReadOnly, ReasonEmptyShard, ReasonShardMismatch, ReasonNotOperator}

// Refusal is a call the binding refused.
type Refusal struct {
	Reason Reason
	// Presented is what the certificate presented (its bigfleet:// URI
	// SANs, or a phrase saying there were none).
	Presented string
	// Needed is the identity the call needed.
	Needed string
	// Msg is the PermissionDenied message: what was presented and what was
	// needed, never the certificate's other contents.
	Msg string
}

// Decide applies ADR-0048/0060 to one call. method is the RPC's short name
// (Create, Get, …); mutation says whether it carries a fencing token, whose
// shard_id is shard; cert says whether a verified client certificate was
// presented at all, and id is its identity. It returns nil when the call
// may proceed.
func Decide(method string, mutation bool, shard string, cert bool, id Identity) *Refusal {
	needed := readNeed
	if mutation {
		needed = shardNeed(shard)
	}
	r := &Refusal{Presented: presented(cert, id), Needed: needed}
	switch {
	case !cert:
		r.Reason = ReasonNoCertificate
	case id.Role == RoleNone:
		r.Reason = ReasonNoSAN
	case id.Role == RoleSeveral:
		r.Reason = ReasonSeveral
	case id.Role == RoleMalformed:
		r.Reason = ReasonMalformed
	case !mutation:
		return nil // shard, readonly and admin may all read
	case id.Role != RoleShard:
		r.Reason = ReasonReadOnly
	case shard == "":
		r.Reason = ReasonEmptyShard
	case shard != id.Shard:
		r.Reason = ReasonShardMismatch
	default:
		return nil
	}
	r.Msg = message(method, r)
	return r
}

// DecideAdminRead applies the same binding to a read of the provider's
// admin service (issue 39): machines with their clusters, shard metadata
// and addresses, every shard's fence marks. Those are for BigFleet's
// operators and dashboards, so only bigfleet://admin and
// bigfleet://readonly may read them, and the operators the provider lets
// write (listed: the certificate matches --admin-clients' typed
// patterns); a shard reads its machines through CapacityProvider. Zero or
// malformed BigFleet identities are refused as on CapacityProvider, and
// several are refused even when listed (ADR-0048: exactly one). It returns
// nil when the call may proceed.
func DecideAdminRead(method string, cert bool, id Identity, listed bool) *Refusal {
	r := &Refusal{Presented: presented(cert, id), Needed: adminReadNeed}
	switch {
	case !cert:
		r.Reason = ReasonNoCertificate
	case id.Role == RoleSeveral:
		r.Reason = ReasonSeveral
	case id.Role == RoleMalformed:
		r.Reason = ReasonMalformed
	case id.Role == RoleAdmin, id.Role == RoleReadonly, listed:
		return nil
	case id.Role == RoleNone:
		r.Reason = ReasonNoSAN
	default: // a shard
		r.Reason = ReasonNotOperator
	}
	r.Msg = message(method, r)
	return r
}

const adminReadNeed = "a URI SAN bigfleet://admin or bigfleet://readonly (or a certificate --admin-clients lists)"

const readNeed = "a URI SAN bigfleet://shard/<shard_id>, bigfleet://readonly or bigfleet://admin"

func shardNeed(shard string) string {
	if shard == "" {
		return "a non-empty shard_id and the URI SAN bigfleet://shard/<that shard_id>"
	}
	return "the URI SAN bigfleet://shard/" + clip(shard) + " (the request's shard_id)"
}

func presented(cert bool, id Identity) string {
	switch {
	case !cert:
		return "no client certificate"
	case len(id.SANs) == 0:
		return "a certificate without a bigfleet:// URI SAN"
	}
	sans := make([]string, len(id.SANs))
	for i, s := range id.SANs {
		sans[i] = clip(s)
	}
	return strings.Join(sans, ", ")
}

func message(method string, r *Refusal) string {
	why := ""
	switch r.Reason {
	case ReasonSeveral:
		why = " (BigFleet identities carry exactly one bigfleet:// URI SAN)"
	case ReasonMalformed:
		why = " (not a BigFleet role)"
	case ReasonReadOnly:
		why = " (which may call Get and List only)"
	case ReasonNotOperator:
		why = " (a shard reads its machines through CapacityProvider; the admin service is for operators)"
	case ReasonEmptyShard:
		why = " (an empty shard_id is refused when callers are bound to their certificates)"
	}
	return fmt.Sprintf("caller identity: %s needs %s; presented %s%s", method, r.Needed, r.Presented, why)
}

// clip keeps what a refusal echoes short and printable: a shard_id or SAN
// may be as long as the RPC layer allows and hold any bytes.
func clip(s string) string {
	const max = 96
	if len(s) > max {
		s = s[:max] + "…"
	}
	q := strconv.Quote(s)
	if q[1:len(q)-1] == s {
		return s // printable as it is: no quotes
	}
	return q
}
