package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// ctl runs the CLI in process against s and returns its output.
func ctl(t *testing.T, s *admintest.Server, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := run(ctx, append([]string{"--addr", s.URL}, args...), &out)
	return out.String(), err
}

func mustCtl(t *testing.T, s *admintest.Server, args ...string) string {
	t.Helper()
	out, err := ctl(t, s, args...)
	if err != nil {
		t.Fatalf("libvirtctl %v: %v\n%s", args, err, out)
	}
	return out
}

func waitState(t *testing.T, s *admintest.Server, id string, st record.State) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := s.Engine.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if m.State == st {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, want %v", id, m.State, st)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestLifecycleThroughCLI walks a machine around the whole lifecycle with
// each protocol, using the fencing flags, and checks the table output.
func TestLifecycleThroughCLI(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"grpc", "connect", "grpcweb"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			s := admintest.Start(t, admintest.Options{})
			p := []string{"--protocol", proto}
			tok := func(seq string) []string { return []string{"--shard", "s1", "--epoch", "2", "--seq", seq} }

			out := mustCtl(t, s, append(append([]string{"create", "m-000"}, p...), tok("1")...)...)
			if !strings.Contains(out, "CREATING") || !strings.Contains(out, "op-") {
				t.Errorf("create output:\n%s", out)
			}
			waitState(t, s, "m-000", record.Idle)

			blob := filepath.Join(t.TempDir(), "blob")
			if err := os.WriteFile(blob, []byte("secret-join-token"), 0o600); err != nil {
				t.Fatal(err)
			}
			out = mustCtl(t, s, append(append([]string{"configure", "m-000", "--cluster", "c1", "--blob-file", blob,
				"--metadata", "team=infra", "--metadata", "pool=a=b"}, p...), tok("2")...)...)
			if !strings.Contains(out, "CONFIGURING") || strings.Contains(out, "secret-join-token") {
				t.Errorf("configure output:\n%s", out)
			}
			waitState(t, s, "m-000", record.Configured)
			if m, _ := s.Engine.Get(t.Context(), "m-000"); m.ShardMetadata["pool"] != "a=b" || m.Cluster != "c1" {
				t.Errorf("configured = %+v", m)
			}
			// The guest's addresses, read at Configure, in get and history
			// (the fake's guest has one on eth0 in 198.51.100.0/24).
			if out = mustCtl(t, s, append([]string{"get", "m-000"}, p...)...); !regexp.MustCompile(`(?m)^addresses +eth0 198\.51\.100\.\d+/24$`).MatchString(out) {
				t.Errorf("get lacks the addresses:\n%s", out)
			}
			if out = mustCtl(t, s, append([]string{"history", "m-000"}, p...)...); !strings.Contains(out, "addresses: eth0 198.51.100.") {
				t.Errorf("history lacks the addresses:\n%s", out)
			}

			// A stale token is fenced: FailedPrecondition, nothing applied.
			_, err := ctl(t, s, append(append([]string{"drain", "m-000", "--grace", "5"}, p...), tok("2")...)...)
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Errorf("stale drain: %v", err)
			}
			mustCtl(t, s, append(append([]string{"drain", "m-000", "--grace", "5"}, p...), tok("3")...)...)
			waitState(t, s, "m-000", record.Idle)
			mustCtl(t, s, append(append([]string{"delete", "m-000"}, p...), tok("4")...)...)
			waitState(t, s, "m-000", record.Speculative)

			out = mustCtl(t, s, append([]string{"history", "m-000"}, p...)...)
			for _, want := range []string{"STARTED", "create", "configure", "drain", "delete", "succeeded"} {
				if !strings.Contains(out, want) {
					t.Errorf("history lacks %q:\n%s", want, out)
				}
			}
			out = mustCtl(t, s, append([]string{"marks"}, p...)...)
			if !strings.Contains(out, "s1") || !strings.Contains(out, "m-000") || !strings.Contains(out, " 4") {
				t.Errorf("marks:\n%s", out)
			}
		})
	}
}

func TestListAndGet(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{Machines: 5})
	mustCtl(t, s, "create", "m-001")
	waitState(t, s, "m-001", record.Idle)

	out := mustCtl(t, s, "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "IN STATE") {
		t.Fatalf("list:\n%s", out)
	}
	if !strings.Contains(lines[2], "m-001") || !strings.Contains(lines[2], "IDLE") || !strings.Contains(lines[2], "zone-b/bf-m-001") {
		t.Errorf("m-001 row: %q", lines[2])
	}

	out = mustCtl(t, s, "list", "--state", "idle")
	if n := strings.Count(out, "\n"); n != 2 || !strings.Contains(out, "m-001") {
		t.Errorf("list --state idle:\n%s", out)
	}
	out = mustCtl(t, s, "list", "--max", "2", "--zone", "zone-a")
	if !strings.Contains(out, "(2 of 3 shown; raise --max)") {
		t.Errorf("list --max 2:\n%s", out)
	}

	out = mustCtl(t, s, "list", "-o", "json", "--state", "SPECULATIVE,MACHINE_STATE_IDLE")
	var lj struct {
		Machines []struct {
			Machine struct{ ID, State string } `json:"machine"`
			Domain  string                     `json:"domain"`
		} `json:"machines"`
		Total int `json:"total_matched"`
	}
	if err := json.Unmarshal([]byte(out), &lj); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if lj.Total != 5 || lj.Machines[1].Machine.State != "MACHINE_STATE_IDLE" || lj.Machines[1].Domain != "bf-m-001" {
		t.Errorf("json list = %+v", lj)
	}

	out = mustCtl(t, s, "get", "m-001")
	for _, want := range []string{"state", "IDLE", "domain", "bf-m-001", "allocatable", `cpu="2"`, "operation", "create op-"} {
		if !strings.Contains(out, want) {
			t.Errorf("get lacks %q:\n%s", want, out)
		}
	}
	out = mustCtl(t, s, "get", "m-001", "-o", "json")
	var gj struct {
		Op string `json:"operation_id"`
	}
	if err := json.Unmarshal([]byte(out), &gj); err != nil || !strings.HasPrefix(gj.Op, "op-") {
		t.Errorf("get -o json:\n%s", out)
	}
	if strings.Contains(out, "198.51.100.") {
		t.Errorf("IDLE machine shows addresses before any Configure:\n%s", out)
	}
	if _, err := ctl(t, s, "get", "nope"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("get nope: %v", err)
	}
}

func TestHostsSummaryWatch(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{Fake: fake.Options{Delays: map[string]time.Duration{fake.OpCreate: 100 * time.Millisecond}}})
	out := mustCtl(t, s, "hosts")
	if !strings.Contains(out, "zone-a") || !strings.Contains(out, "fake://zone-b") || !strings.Contains(out, "yes") {
		t.Errorf("hosts:\n%s", out)
	}
	out = mustCtl(t, s, "summary")
	if !strings.Contains(out, "SPECULATIVE") || !strings.Contains(out, "machines: 4") || !strings.Contains(out, "admin writes: off") {
		t.Errorf("summary:\n%s", out)
	}

	// watch prints the snapshot, then the changes a Create causes.
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	var buf syncBuf
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	go func() {
		err := run(ctx, []string{"--addr", s.URL, "--protocol", "grpcweb", "watch", "--events", "2"}, &buf)
		done <- result{buf.String(), err}
	}()
	for !strings.Contains(buf.String(), "watching for changes") {
		select {
		case r := <-done:
			t.Fatalf("watch ended early: %v\n%s", r.err, r.out)
		case <-time.After(5 * time.Millisecond):
		}
	}
	mustCtl(t, s, "create", "m-003")
	r := <-done
	if r.err != nil || !strings.Contains(r.out, "m-003") || !strings.Contains(r.out, "CREATING") || !strings.Contains(r.out, "IDLE") {
		t.Errorf("watch: %v\n%s", r.err, r.out)
	}
}

func TestAdminWrites(t *testing.T) {
	t.Parallel()
	ro := admintest.Start(t, admintest.Options{})
	if _, err := ctl(t, ro, "reconcile"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("reconcile without --admin-write: %v", err)
	}
	if _, err := ctl(t, ro, "release", "m-000"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("release without --admin-write: %v", err)
	}

	s := admintest.Start(t, admintest.Options{AdminWrite: true})
	s.Fake.SetFailure("create", "m-002", errors.New("no space left in pool"))
	mustCtl(t, s, "create", "m-002")
	waitState(t, s, "m-002", record.Failed)
	out := mustCtl(t, s, "list", "--state", "failed")
	if !strings.Contains(out, "no space left in pool") {
		t.Errorf("failed list:\n%s", out)
	}
	out = mustCtl(t, s, "release", "m-002")
	if !strings.Contains(out, "DELETING") {
		t.Errorf("release:\n%s", out)
	}
	waitState(t, s, "m-002", record.Speculative)
	out = mustCtl(t, s, "reconcile")
	if !strings.Contains(out, "adopted 0, vanished 0") || !strings.Contains(out, "zone-a") {
		t.Errorf("reconcile:\n%s", out)
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{TLS: true})
	for _, proto := range []string{"grpc", "connect", "grpcweb"} {
		var out bytes.Buffer
		err := run(t.Context(), []string{"--addr", s.URL, "--insecure", "--protocol", proto, "hosts"}, &out)
		if err != nil || !strings.Contains(out.String(), "zone-a") {
			t.Errorf("%s over TLS: %v\n%s", proto, err, out.String())
		}
	}
	// Without --insecure or a CA the self-signed certificate is refused.
	var out bytes.Buffer
	if err := run(t.Context(), []string{"--addr", s.URL, "hosts"}, &out); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("unverified TLS: %v", err)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"frobnicate"},
		{"get"},
		{"list", "extra"},
		{"--protocol", "smtp", "list"},
		{"list", "-o", "yaml"},
		{"list", "--state", "SLEEPY"},
		{"configure", "m-1", "--cluster", "c"},
		{"drain", "m-1"},
		{"--tls-cert", "c.pem", "list"},
		{"configure", "m-1", "--metadata", "novalue"},
	} {
		var out bytes.Buffer
		err := run(t.Context(), append([]string{"--addr", "127.0.0.1:1"}, args...), &out)
		if err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"help"}, &out); err != nil || !strings.Contains(out.String(), "configure") ||
		!strings.Contains(out.String(), "-protocol") {
		t.Errorf("help: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run(t.Context(), []string{"configure", "-h"}, &out); err != nil || !strings.Contains(out.String(), "-blob-file") ||
		!strings.Contains(out.String(), "-seq") {
		t.Errorf("configure -h: %v\n%s", err, out.String())
	}
}

func TestHuman(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		850 * time.Millisecond: "850ms", 12 * time.Second: "12s", 192 * time.Second: "3m12s",
		2*time.Hour + 5*time.Minute: "2h05m", 76 * time.Hour: "3d04h", -time.Second: "0s",
	} {
		if got := human(d); got != want {
			t.Errorf("human(%v) = %q, want %q", d, got, want)
		}
	}
}
