package lifecycle

import "unicode/utf8"

// Documented caps on what a Configure may carry. Over a cap the request is
// InvalidArgument and nothing changes.
const (
	MaxBootstrapBlobBytes   = 4 << 20  // 4 MiB
	MaxShardMetadataEntries = 256      // keys per machine
	MaxShardMetadataKey     = 256      // bytes per key
	MaxShardMetadataBytes   = 64 << 10 // keys + values, in total
	MaxClusterIDBytes       = 253
	MaxMachineIDBytes       = 253
)

func validateID(id string) *Error {
	switch {
	case id == "":
		return errorf(CodeInvalid, "machine_id is required")
	case len(id) > MaxMachineIDBytes:
		return errorf(CodeInvalid, "machine_id is longer than %d bytes", MaxMachineIDBytes)
	}
	return nil
}

// validateToken: an empty shard_id means "no token"; with a shard_id, the
// epoch and sequence must not be negative.
func validateToken(t Token) *Error {
	if t.ShardID != "" && (t.Epoch < 0 || t.Sequence < 0) {
		return errorf(CodeInvalid, "shard_epoch and sequence_number must not be negative (got %d, %d)", t.Epoch, t.Sequence)
	}
	return nil
}

func validateConfigure(r ConfigureRequest) *Error {
	switch {
	case r.ClusterID == "":
		return errorf(CodeInvalid, "cluster_id is required")
	case len(r.ClusterID) > MaxClusterIDBytes:
		return errorf(CodeInvalid, "cluster_id is longer than %d bytes", MaxClusterIDBytes)
	case !utf8.ValidString(r.ClusterID):
		return errorf(CodeInvalid, "cluster_id is not valid UTF-8")
	case len(r.BootstrapBlob) > MaxBootstrapBlobBytes:
		return errorf(CodeInvalid, "bootstrap_blob is %d bytes, over the %d-byte cap", len(r.BootstrapBlob), MaxBootstrapBlobBytes)
	case len(r.ShardMetadata) > MaxShardMetadataEntries:
		return errorf(CodeInvalid, "shard_metadata has %d entries, over the cap of %d", len(r.ShardMetadata), MaxShardMetadataEntries)
	}
	total := 0
	for k, v := range r.ShardMetadata {
		if len(k) > MaxShardMetadataKey {
			return errorf(CodeInvalid, "a shard_metadata key is %d bytes, over the %d-byte cap", len(k), MaxShardMetadataKey)
		}
		total += len(k) + len(v)
	}
	if total > MaxShardMetadataBytes {
		return errorf(CodeInvalid, "shard_metadata is %d bytes, over the %d-byte cap", total, MaxShardMetadataBytes)
	}
	return nil
}
