package lifecycle

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/fence"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
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
		fmt.Sprintf("| `bootstrap_blob` | %d MiB |", record.MaxBootstrapBlobBytes>>20),
		fmt.Sprintf("| `shard_metadata` | %d entries, %d bytes per key, %d KiB per value, %d KiB of keys and values in total |",
			record.MaxShardMetadataEntries, record.MaxShardMetadataKey, record.MaxShardMetadataValue>>10, record.MaxShardMetadataBytes>>10),
		fmt.Sprintf("`id` (Get) | %d bytes |", record.MaxMachineIDBytes),
		fmt.Sprintf("| `cluster_id` | %d bytes", record.MaxClusterIDBytes),
		fmt.Sprintf("| `shard_id` | %d bytes |", record.MaxShardIDBytes),
		fmt.Sprintf("at most %d,%03d of them", fence.DefaultUnknownMarkLimit/1000, fence.DefaultUnknownMarkLimit%1000),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/contract.md lacks %q", want)
		}
	}
}
