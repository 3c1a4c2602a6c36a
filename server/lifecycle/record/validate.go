package record

import (
	"unicode"
	"unicode/utf8"
)

// Documented caps on what a request may carry (docs/contract.md, "Caps").
// Over a cap the request is InvalidArgument, naming the field and the cap,
// and nothing changes. They keep every record and fence-mark key far below
// the store's own limits (bbolt: 32 KiB keys), so a caller's mistake is
// answered as the caller's mistake, never as a store outage that BigFleet
// would retry forever.
const (
	MaxBootstrapBlobBytes   = 4 << 20  // 4 MiB
	MaxShardMetadataEntries = 256      // keys per machine
	MaxShardMetadataKey     = 256      // bytes per key
	MaxShardMetadataValue   = 4 << 10  // bytes per value
	MaxShardMetadataBytes   = 64 << 10 // keys + values, in total
	MaxClusterIDBytes       = 253      // a DNS name
	// MaxMachineIDBytes bounds machine ids. Seeded ids are
	// "<zone>-[bm-]<type>-<index>", well under it (zone and type names
	// are at most 63 bytes); New refuses a seed id over it.
	MaxMachineIDBytes = 253
	MaxShardIDBytes   = 256
)

func overCap(field string, n, limit int) *Error {
	return Errorf(CodeInvalid, "%s is %d bytes; the limit is %d", field, n, limit)
}

// ValidateID checks a machine id (field names it on the wire). It runs
// before the fence: an id that is empty or over the cap names no machine
// and can hold no mark (no id over the cap was ever accepted, and seed ids
// are checked against it), so the fence could only pass it as first
// contact; refusing it first changes no answer and keeps it out of every
// map and lock.
func ValidateID(field, id string) *Error {
	switch {
	case id == "":
		return Errorf(CodeInvalid, "%s is required", field)
	case len(id) > MaxMachineIDBytes:
		return overCap(field, len(id), MaxMachineIDBytes)
	}
	return nil
}

// ValidateToken checks the token's own values. It runs AFTER the fence
// (contract: the fence runs before any check of the token's own values):
// a token that is not newer than its mark is FailedPrecondition whatever
// its parts. Only a token that passes the fence is refused here, and then
// its mark does not advance. The shard_id length is checked here too, not
// before the fence, because a store written before the cap existed may
// hold a mark for a longer shard id; the fence lookup is a map read, cheap
// whatever the length. An empty shard_id means "no token".
func ValidateToken(t Token) *Error {
	switch {
	case t.ShardID == "":
		return nil
	case len(t.ShardID) > MaxShardIDBytes:
		return overCap("shard_id", len(t.ShardID), MaxShardIDBytes)
	}
	return nil
}

func ValidateConfigure(r ConfigureRequest) *Error {
	if err := validateClusterID(r.ClusterID); err != nil {
		return err
	}
	switch {
	case len(r.BootstrapBlob) > MaxBootstrapBlobBytes:
		return overCap("bootstrap_blob", len(r.BootstrapBlob), MaxBootstrapBlobBytes)
	case len(r.ShardMetadata) > MaxShardMetadataEntries:
		return Errorf(CodeInvalid, "shard_metadata has %d entries; the limit is %d", len(r.ShardMetadata), MaxShardMetadataEntries)
	}
	return validateMetadata(r.ShardMetadata)
}

// validateClusterID: required, at most MaxClusterIDBytes, valid UTF-8,
// and no control characters (docs/contract.md, "Caps").
func validateClusterID(id string) *Error {
	switch {
	case id == "":
		return Errorf(CodeInvalid, "cluster_id is required")
	case len(id) > MaxClusterIDBytes:
		return overCap("cluster_id", len(id), MaxClusterIDBytes)
	case !utf8.ValidString(id):
		return Errorf(CodeInvalid, "cluster_id is not valid UTF-8")
	}
	if i := controlAt(id); i >= 0 {
		r, _ := utf8.DecodeRuneInString(id[i:])
		return Errorf(CodeInvalid, "cluster_id has a control character (%U at byte %d); control characters (C0, DEL, C1) are not allowed", r, i)
	}
	return nil
}

// controlAt returns the byte offset of the first control character in s
// (Unicode Cc: C0, DEL and C1), or -1. A cluster id reaches the guest's
// hooks as a C string and in log lines: a NUL there cut "a\nb\x00c" to
// "a\nb" in the hook while the provider reported the whole string (issue
// 15 case 8), and a newline would split a log line. Beyond that the id is
// opaque to the provider (BigFleet cluster ids are opaque strings).
func controlAt(s string) int {
	for i, r := range s {
		if unicode.IsControl(r) {
			return i
		}
	}
	return -1
}

// validateMetadata checks each key and value, then the total. Messages name
// a key by its length only: keys may be long and hold any bytes.
func validateMetadata(md map[string]string) *Error {
	total := 0
	for k, v := range md {
		if len(k) > MaxShardMetadataKey {
			return overCap("a shard_metadata key", len(k), MaxShardMetadataKey)
		}
		if len(v) > MaxShardMetadataValue {
			return overCap("a shard_metadata value", len(v), MaxShardMetadataValue)
		}
		total += len(k) + len(v)
	}
	if total > MaxShardMetadataBytes {
		return overCap("shard_metadata (keys and values)", total, MaxShardMetadataBytes)
	}
	return nil
}
