package server

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCurlJSON is the debugging path from the startup banner: Connect JSON
// with curl over HTTP/1.1 and over HTTP/2 cleartext with prior knowledge.
func TestCurlJSON(t *testing.T) {
	t.Parallel()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed; skipping the curl/JSON check")
	}
	ts := startServer(t, modeH2C)
	for _, tc := range []struct{ name, flag, proto string }{
		{"http1.1", "--http1.1", "1.1"},
		{"h2c", "--http2-prior-knowledge", "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := exec.CommandContext(t.Context(), curl, "-sS", tc.flag,
				"-w", "\n%{http_version} %{http_code}",
				"-H", "Content-Type: application/json", "-d", `{"id":"m-spec"}`,
				ts.url+"/bigfleet.v1alpha1.CapacityProvider/Get").CombinedOutput()
			if err != nil {
				t.Fatalf("curl: %v\n%s", err, out)
			}
			body, status, _ := strings.Cut(string(out), "\n")
			if status != tc.proto+" 200" || !strings.Contains(body, `"state":"MACHINE_STATE_SPECULATIVE"`) ||
				!strings.Contains(body, `"instanceType":"small"`) {
				t.Errorf("curl got %q / %q", status, body)
			}
		})
	}
}
