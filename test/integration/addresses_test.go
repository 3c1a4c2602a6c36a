//go:build integration

package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// TestGuestAddressesInLibvirtctl: the test guest's /init gives its NIC an
// address derived from its MAC (198.18.0.0/15); once Configure succeeded,
// `libvirtctl get` shows that address, read through the agent's
// guest-network-get-interfaces, and `libvirtctl history` the Configure's
// note with it. Loopback and the NIC's IPv6 link-local address are left out.
func TestGuestAddressesInLibvirtctl(t *testing.T) {
	e := loadEnv(t)
	p := startBinary(t, e)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	ctlBin := filepath.Join(t.TempDir(), "libvirtctl")
	if out, err := exec.Command("go", "build", "-o", ctlBin, "../../cmd/libvirtctl").CombinedOutput(); err != nil {
		t.Fatalf("build libvirtctl: %v\n%s", err, out)
	}
	ctl := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, ctlBin, append([]string{"--addr", p.conn.Target()}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("libvirtctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	id := p.slot(t, "local").Id
	m := p.transition(t, ctx, "Create", &pb.CreateRequest{MachineId: id}, pb.MachineState_MACHINE_STATE_IDLE)
	domain := strings.TrimPrefix(m.GetHost().GetRef(), "local/")
	t.Cleanup(func() { cleanupDomain(t, e, domain) })
	want := guestAddress(t, virsh(t, e, "domiflist", domain))

	row := regexp.MustCompile(`(?m)^addresses +(.*)$`)
	if got := row.FindStringSubmatch(ctl("get", id)); got == nil || strings.Contains(got[1], "198.18") {
		t.Fatalf("IDLE before any Configure: addresses row %q, want none read yet", got)
	}
	p.transition(t, ctx, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-addr",
		BootstrapBlob: []byte("blob")}, pb.MachineState_MACHINE_STATE_CONFIGURED)
	out := ctl("get", id)
	got := row.FindStringSubmatch(out)
	if got == nil || strings.TrimSpace(got[1]) != "eth0 "+want {
		t.Fatalf("libvirtctl get: addresses row %q, want %q\n%s", got, "eth0 "+want, out)
	}
	if h := ctl("history", id); !strings.Contains(h, "addresses: eth0 "+want) {
		t.Fatalf("libvirtctl history lacks the addresses:\n%s", h)
	}
	t.Logf("guest %s addresses: %s", domain, strings.TrimSpace(got[1]))
	p.transition(t, ctx, "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: 2}, pb.MachineState_MACHINE_STATE_IDLE)
	p.transition(t, ctx, "Delete", &pb.DeleteRequest{MachineId: id}, pb.MachineState_MACHINE_STATE_SPECULATIVE)
}

// guestAddress is the address the test guest's /init derives from its
// first NIC's MAC (virsh domiflist): 198.18.<5th byte>.<6th byte>/15.
func guestAddress(t *testing.T, domiflist string) string {
	t.Helper()
	mac := regexp.MustCompile(`([0-9a-f]{2}):([0-9a-f]{2}):([0-9a-f]{2}):([0-9a-f]{2}):([0-9a-f]{2}):([0-9a-f]{2})`).FindStringSubmatch(domiflist)
	if mac == nil {
		t.Fatalf("no MAC in domiflist:\n%s", domiflist)
	}
	b5, _ := strconv.ParseUint(mac[5], 16, 8)
	b6, _ := strconv.ParseUint(mac[6], 16, 8)
	return fmt.Sprintf("198.18.%d.%d/15", b5, b6)
}
