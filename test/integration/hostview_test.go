//go:build integration

package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// Helpers shared by the suites that run bin/libvirt on several hosts (the
// pool's two local daemons, the lab's remote hosts).

// awaitServing waits (60 s at most) until bin/libvirt answers a List, and
// fails at once with its output if it exits first.
func awaitServing(t *testing.T, p *binProc, done <-chan struct{}, out fmt.Stringer) {
	t.Helper()
	waitUntil(t, 60*time.Second, "bin/libvirt to serve", func() bool {
		select {
		case <-done:
			t.Fatalf("bin/libvirt exited at startup:\n%s", out)
		default:
		}
		var l pb.MachineList
		return p.call(t.Context(), "List", &pb.ListFilter{}, &l) == nil
	})
}

// hostView is the admin view of the named host (nil when absent or on error).
func hostView(t *testing.T, conn *grpc.ClientConn, name string) *adminv1.Host {
	t.Helper()
	var res adminv1.ListHostsResponse
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := conn.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/ListHosts", &adminv1.ListHostsRequest{}, &res); err != nil {
		t.Logf("ListHosts: %v", err)
		return nil
	}
	for _, h := range res.GetHosts() {
		if h.GetName() == name {
			return h
		}
	}
	return nil
}

// awaitHostView waits (90 s at most) until the host's connected flag is as
// wanted, logs and returns how long that took.
func awaitHostView(t *testing.T, conn *grpc.ClientConn, name string, connected bool) time.Duration {
	t.Helper()
	t0 := time.Now()
	waitUntil(t, 90*time.Second, fmt.Sprintf("host %s connected=%v", name, connected), func() bool {
		h := hostView(t, conn, name)
		return h != nil && h.GetConnected() == connected
	})
	d := time.Since(t0).Round(time.Millisecond)
	t.Logf("TIMING host %s connected=%v after %s", name, connected, d)
	return d
}

// agentCmd is one guest-agent command, as virsh qemu-agent-command takes it.
type agentCmd struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
}

// agentCatVia reads a file in the guest through its agent (guest-exec of
// /bin/cat, then guest-exec-status until it exited), with virsh run by the
// caller's means (a URI, or inside a lab host).
func agentCatVia(t *testing.T, virsh func(args ...string) string, domain, path string) string {
	t.Helper()
	run := func(c agentCmd, res any) {
		raw, err := json.Marshal(c)
		must(t, err)
		out := virsh("qemu-agent-command", domain, string(raw))
		if err := json.Unmarshal([]byte(out), res); err != nil {
			t.Fatalf("%s on %s: %q: %v", c.Execute, domain, out, err)
		}
	}
	var started struct {
		Return struct{ PID int } `json:"return"`
	}
	run(agentCmd{"guest-exec", map[string]any{"path": "/bin/cat", "arg": []string{path}, "capture-output": true}}, &started)
	for range 100 {
		var st struct {
			Return struct {
				Exited  bool   `json:"exited"`
				OutData string `json:"out-data"`
			} `json:"return"`
		}
		run(agentCmd{"guest-exec-status", map[string]int{"pid": started.Return.PID}}, &st)
		if st.Return.Exited {
			out, err := base64.StdEncoding.DecodeString(st.Return.OutData)
			must(t, err)
			return strings.TrimSpace(string(out))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("cat %s in %s did not finish", path, domain)
	return ""
}
