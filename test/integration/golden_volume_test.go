//go:build integration && (golden || shapes)

package integration

import (
	"os/exec"
	"strings"
	"testing"
)

// goldenPoolVolume puts a golden image of scripts/golden/build.sh into the
// env's pool with the script make demo uses (once per content) and returns
// the volume's name.
func goldenPoolVolume(t *testing.T, e env, image string) string {
	t.Helper()
	cmd := exec.Command("../../scripts/golden/pool-volume.sh", e.URI, e.Pool, image)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pool-volume.sh %s: %v %s", image, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}
