package guestagent

import (
	"bytes"
	"context"
	"encoding/base64"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func randomBlob(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return b
}

func TestRedactReplacesRunsOfTheBlob(t *testing.T) {
	t.Parallel()
	blob := randomBlob(4096)
	b64 := base64.StdEncoding.EncodeToString(blob[7:])
	forms := newSecretForms(blob)
	for _, tc := range []struct {
		name, out, want string
	}{
		{"raw run", "token " + string(blob[100:140]) + " rejected", "token [blob] rejected"},
		{"base64, aligned", "got " + base64.StdEncoding.EncodeToString(blob)[:64] + "\n", "got [blob]\n"},
		{"base64 of a piece", "echo " + b64[20:60] + " end", "echo [blob] end"},
		{"two runs", string(blob[0:16]) + "|" + string(blob[500:530]), "[blob]|[blob]"},
		{"short piece kept", "x" + string(blob[10:25]) + "y", "x" + string(blob[10:25]) + "y"},
		{"no blob", "plain failure: connection refused", "plain failure: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := string(forms.redact([]byte(tc.out))); got != tc.want {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestRedactBoundsItsWork(t *testing.T) {
	t.Parallel()
	blob := randomBlob(64)
	out := append(bytes.Repeat([]byte("a"), 10*redactWindow), blob...)
	got := newSecretForms(blob).redact(out)
	if len(got) > redactWindow || !bytes.HasSuffix(got, blobMark) {
		t.Fatalf("len %d, tail %q", len(got), got[max(0, len(got)-20):])
	}
	if got := newSecretForms([]byte("short")).redact([]byte("short short short short")); string(got) != "short short short short" {
		t.Fatalf("a secret under %d bytes changed output: %q", minSecretRun, got)
	}
}

// TestConfigureRedactsBlobFromHookOutput: a hook that prints the blob it
// was given (raw or base64) fails Configure with [blob] in the error, never
// the blob's bytes; the ready hook too.
func TestConfigureRedactsBlobFromHookOutput(t *testing.T) {
	t.Parallel()
	blob := randomBlob(2048)
	for _, hook := range []string{DefaultBootstrapHook, DefaultReadyHook} {
		t.Run(hook, func(t *testing.T) {
			t.Parallel()
			b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
			echo := "invalid token " + base64.StdEncoding.EncodeToString(blob)[:200] + " raw:" + string(blob[300:400])
			g.programs[hook] = fixed(proc{Exit: 1, Stderr: echo})
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // the ready hook is polled until it
			defer cancel()
			err := b.Configure(ctx, cluster, blob)
			if err == nil || !strings.Contains(err.Error(), "invalid token [blob] raw:[blob]") {
				t.Fatalf("err = %v", err)
			}
			if strings.Contains(err.Error(), base64.StdEncoding.EncodeToString(blob)[:16]) {
				t.Fatal("base64 of the blob in the error")
			}
		})
	}
}

func FuzzRedact(f *testing.F) {
	f.Add([]byte("0123456789abcdefXYZ"), []byte("pre 0123456789abcdef post"))
	f.Fuzz(func(t *testing.T, secret, out []byte) {
		got := newSecretForms(secret).redact(out)
		if len(secret) < minSecretRun {
			return
		}
		// No minSecretRun-byte piece of the secret survives.
		for i := 0; i+minSecretRun <= len(got); i++ {
			if bytes.Contains(secret, got[i:i+minSecretRun]) && !bytes.Contains(got[i:i+minSecretRun], blobMark) {
				t.Fatalf("secret run survived at %d: %q", i, got)
			}
		}
	})
}
