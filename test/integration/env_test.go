//go:build integration

// Package integration drives the libvirt backend against a real libvirtd and
// the TCG test guest that scripts/libvirt-env.sh sets up. Run it with
// `make test-integration`; without BIGFLEET_LIBVIRT_ENV it skips.
package integration

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt"
)

// env is the environment file written by scripts/libvirt-env.sh up.
type env struct {
	URI, Pool, Image, Network, Kernel, Initrd, Cmdline string
	// Accel is the env script's proven accelerator ("kvm" or "tcg (why)");
	// DomainType what the provider is told (--domain-type / DomainType):
	// the env's kvm|qemu, or BIGFLEET_DOMAIN_TYPE_OVERRIDE (e.g. auto, so
	// the provider's own fallback is what the suite exercises).
	Accel, DomainType string
}

// envPath is the env file, "" when the suite is not meant to run.
func envPath() string { return os.Getenv("BIGFLEET_LIBVIRT_ENV") }

func readEnv(path string) (env, error) {
	f, err := os.Open(path)
	if err != nil {
		return env{}, fmt.Errorf("BIGFLEET_LIBVIRT_ENV=%s: %v", path, err)
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		kv[k] = strings.Trim(v, `'"`)
	}
	e := env{URI: kv["BIGFLEET_LIBVIRT_URI"], Pool: kv["BIGFLEET_POOL"], Image: kv["BIGFLEET_IMAGE"],
		Network: kv["BIGFLEET_NETWORK"], Kernel: kv["BIGFLEET_KERNEL"], Initrd: kv["BIGFLEET_INITRD"],
		Cmdline: kv["BIGFLEET_CMDLINE"], Accel: kv["BIGFLEET_ACCEL"], DomainType: kv["BIGFLEET_DOMAIN_TYPE"]}
	if o := os.Getenv("BIGFLEET_DOMAIN_TYPE_OVERRIDE"); o != "" {
		e.DomainType = o
	}
	if e.URI == "" || e.Pool == "" || e.Image == "" {
		return env{}, fmt.Errorf("%s lacks BIGFLEET_LIBVIRT_URI/POOL/IMAGE", path)
	}
	if e.Accel == "" || e.DomainType == "" {
		return env{}, fmt.Errorf("%s lacks BIGFLEET_ACCEL/BIGFLEET_DOMAIN_TYPE: rerun scripts/libvirt-env.sh up", path)
	}
	return e, nil
}

func loadEnv(t *testing.T) env {
	t.Helper()
	path := envPath()
	if path == "" {
		t.Skip("BIGFLEET_LIBVIRT_ENV is not set: run `make test-integration` (it runs scripts/libvirt-env.sh up and points this at its env file)")
	}
	e, err := readEnv(path)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// newBackend opens the backend on the real host as zone "local", plus any
// extra hosts.
func newBackend(t *testing.T, e env, provider string, extra ...libvirt.Host) *libvirt.Backend {
	t.Helper()
	return newBackendWith(t, e, provider, func(c *libvirt.Config) { c.Hosts = append(c.Hosts, extra...) })
}

// callTimeout is the integration suite's --libvirt-call-timeout. The
// suite runs on every kind of KVM host, and where /dev/kvm is root-only
// libvirt re-probes QEMU on every call: a define took over 30 s (the
// default bound) on a loaded 2-core machine, so every Create attempt ran
// past it and the retries piled up on the daemon. The bound itself is
// tested on the lab (TestLabWedge*), with 10 s.
const callTimeout = 3 * time.Minute

var callTimeoutArg = "--libvirt-call-timeout=" + callTimeout.String()

// newBackendWith is newBackend with a hook to adjust the config.
func newBackendWith(t *testing.T, e env, provider string, mutate func(*libvirt.Config)) *libvirt.Backend {
	t.Helper()
	cfg := libvirt.Config{
		Hosts:    []libvirt.Host{{Zone: "local", URI: e.URI}},
		Provider: provider, Image: e.Image, Pool: e.Pool, Network: e.Network,
		Kernel: e.Kernel, Initrd: e.Initrd, Cmdline: e.Cmdline, DomainType: e.DomainType,
		Bootstrap:    guestagent.BootstrapConfig{AgentWait: 90 * time.Second, DrainMargin: 10 * time.Second},
		ReconnectMax: 2 * time.Second,
		CallTimeout:  callTimeout,
		Logger:       slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	mutate(&cfg)
	b, err := libvirt.New(cfg)
	if err != nil {
		t.Fatalf("libvirt.New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	// New gives up waiting for a slow host and connects in the background:
	// where libvirt re-probes QEMU on every call (root-only /dev/kvm) that
	// takes seconds.
	t0 := time.Now()
	waitUntil(t, 90*time.Second, "host local to connect", func() bool { return b.ZoneReady("local") == nil })
	if d := time.Since(t0); d > time.Second {
		t.Logf("host local connected %s after libvirt.New returned", d.Round(time.Millisecond))
	}
	return b
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// uniq keeps machine ids of concurrent or repeated runs apart.
func uniq(prefix string) string {
	return prefix + "-" + strings.ReplaceAll(time.Now().UTC().Format("150405.000"), ".", "")
}

func machine(id string) backend.MachineSpec {
	return backend.MachineSpec{MachineID: id, OperationID: "op-create-" + id, Zone: "local",
		InstanceType: "tiny", VCPU: 1, MemoryMiB: 128}
}

// createGuest creates a VM, waits for its agent, and deletes it at cleanup.
// It returns the Create time (provider overhead) and start→first ping.
func createGuest(t *testing.T, b *libvirt.Backend, id string) (backend.Placement, time.Duration, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	pl, err := b.Create(ctx, machine(id))
	if err != nil {
		t.Fatalf("Create: %v%s", err, qemuLogTail(pl.Domain))
	}
	created := time.Since(t0)
	t.Cleanup(func() {
		_ = b.Delete(context.Background(), backend.DeleteSpec{MachineID: id, Zone: "local", Placement: pl})
	})
	c, err := b.AgentClient(pl)
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("guest agent never answered (accelerator %s, domain type %s): %v%s", accel.Accel, accel.DomainType, err, qemuLogTail(pl.Domain))
	}
	return pl, created, time.Since(t1)
}

// guestCat reads a file in the guest with guest-exec (argv, no shell).
func guestCat(t *testing.T, b *libvirt.Backend, pl backend.Placement, path string) string {
	t.Helper()
	c, err := b.AgentClient(pl)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.RunHook(t.Context(), []string{"/bin/cat", path}, 30*time.Second)
	if err != nil || !res.OK() {
		t.Fatalf("cat %s: %v %+v", path, err, res)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func virsh(t *testing.T, e env, args ...string) string {
	t.Helper()
	out, err := exec.Command("virsh", append([]string{"-q", "-c", e.URI}, args...)...).CombinedOutput()
	if err != nil {
		t.Logf("virsh %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// stats are what docs/benchmarks.md quotes.
func stats(ds []time.Duration) (median, p95 time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)-1, (len(s)*95+99)/100-1)]
}
