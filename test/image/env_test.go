//go:build image

package image

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// repoRoot is the checkout this package lives in.
const repoRoot = "../.."

// libvirtEnv is what scripts/libvirt-env.sh up wrote.
type libvirtEnv struct {
	URI, Pool, Image, Network, Kernel, Initrd, Cmdline, DomainType string
}

func loadEnv(t *testing.T) libvirtEnv {
	t.Helper()
	path := os.Getenv("BIGFLEET_LIBVIRT_ENV")
	if path == "" {
		t.Fatal("BIGFLEET_LIBVIRT_ENV is not set: run make test-image (it runs scripts/libvirt-env.sh up)")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export "), "=")
		if ok {
			kv[k] = strings.Trim(v, `'"`)
		}
	}
	e := libvirtEnv{URI: kv["BIGFLEET_LIBVIRT_URI"], Pool: kv["BIGFLEET_POOL"], Image: kv["BIGFLEET_IMAGE"],
		Network: kv["BIGFLEET_NETWORK"], Kernel: kv["BIGFLEET_KERNEL"], Initrd: kv["BIGFLEET_INITRD"],
		Cmdline: kv["BIGFLEET_CMDLINE"], DomainType: kv["BIGFLEET_DOMAIN_TYPE"]}
	if e.URI == "" || e.Pool == "" || e.Image == "" {
		t.Fatalf("%s: incomplete env %+v", path, e)
	}
	return e
}

// imageOut is make image's output directory.
func imageOut(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("IMAGE_OUT")
	if dir == "" {
		dir = filepath.Join(repoRoot, "out", "image")
	}
	if _, err := os.Stat(filepath.Join(dir, "image.json")); err != nil {
		t.Fatalf("no image built in %s (run make image): %v", dir, err)
	}
	return dir
}

// run runs a command and returns its combined output, failing the test
// on error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func waitUntil(t *testing.T, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
