package lifecycle

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestCapsDocumented: docs/contract.md states the caps this package
// enforces, so the two cannot drift apart.
func TestCapsDocumented(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, want := range []string{
		fmt.Sprintf("| `bootstrap_blob` | %d MiB |", MaxBootstrapBlobBytes>>20),
		fmt.Sprintf("| `shard_metadata` | %d entries, %d bytes per key, %d KiB per value, %d KiB of keys and values in total |",
			MaxShardMetadataEntries, MaxShardMetadataKey, MaxShardMetadataValue>>10, MaxShardMetadataBytes>>10),
		fmt.Sprintf("`id` (Get) | %d bytes |", MaxMachineIDBytes),
		fmt.Sprintf("| `cluster_id` | %d bytes", MaxClusterIDBytes),
		fmt.Sprintf("| `shard_id` | %d bytes |", MaxShardIDBytes),
		fmt.Sprintf("at most %d,%03d of them", DefaultUnknownMarkLimit/1000, DefaultUnknownMarkLimit%1000),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/contract.md lacks %q", want)
		}
	}
}
