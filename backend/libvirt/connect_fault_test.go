package libvirt

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// kvmDenied is what QEMU says when it cannot open /dev/kvm.
var kvmDenied = libvirt.Error{Code: libvirt.ERR_INTERNAL_ERROR, Domain: libvirt.FROM_QEMU, Level: libvirt.ERR_ERROR,
	Message: "internal error: process exited while connecting to monitor: Could not access KVM kernel module: Permission denied"}

// offerKVM rewrites the test driver's capabilities to offer an x86_64 hvm
// guest under kvm and qemu, as a KVM host's do.
func offerKVM(t testing.TB) func(string) string {
	return func(s string) string {
		var caps libvirtxml.Caps
		if err := caps.Unmarshal(s); err != nil {
			t.Errorf("capabilities: %v", err)
			return s
		}
		caps.Guests = append(caps.Guests, libvirtxml.CapsGuest{OSType: "hvm", Arch: libvirtxml.CapsGuestArch{
			Name: "x86_64", WordSize: "64", Emulator: "/usr/bin/qemu-system-x86_64",
			Domains: []libvirtxml.CapsGuestDomain{{Type: "qemu"}, {Type: "kvm"}}}})
		out, err := caps.Marshal()
		if err != nil {
			t.Errorf("capabilities: %v", err)
			return s
		}
		return out
	}
}

// TestCapabilitiesReadFailureKeepsHostDown is issue 10's path 5: a failed
// capabilities read at connect used to leave the host connected with no
// usable domain type. It keeps the host down, says why at WARN, and the
// next dial that reads them connects with the right type.
func TestCapabilitiesReadFailureKeepsHostDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind faultKind
		want string
	}{
		{faultRPC, "read host capabilities: injected rpc failure"},
		{faultGarbage, "parse host capabilities: "},
	} {
		t.Run(kindName(tc.kind), func(t *testing.T) {
			t.Parallel()
			b, f, logs := newFaultBackend(t, func(c *Config) {
				c.ReconnectMin, c.ReconnectMax = 400*time.Millisecond, 400*time.Millisecond
			}, func(f *faults) {
				f.add(&fault{op: "conn.GetCapabilities", nth: 1, kind: tc.kind})
			})
			err := b.ZoneReady("z1")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ready = %v, want the host down with %q", err, tc.want)
			}
			if hs := b.Hosts(context.Background()); hs[0].Connected || !strings.Contains(hs[0].LastError, tc.want) {
				t.Fatalf("hosts %+v", hs[0])
			}
			if _, err := b.Create(context.Background(), spec("m1")); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create on the refused host: %v", err)
			}
			if !strings.Contains(logs.String(), `"level":"WARN","msg":"libvirt host refused"`) {
				t.Fatalf("no WARN:\n%s", logs)
			}
			waitFor(t, 5*time.Second, func() bool { return b.ZoneReady("z1") == nil })
			if got := b.DomainType("z1"); got != "test" {
				t.Fatalf("domain type after reconnect %q", got)
			}
			f.mu.Lock()
			dials := f.dials
			f.mu.Unlock()
			if dials != 2 {
				t.Fatalf("dials %d, want 2", dials)
			}
			mustCreate(t, b, "m1")
		})
	}
}

// TestAutoFallsBackWhenKVMProbeFails: kvm is offered but QEMU cannot open
// it: an auto host runs guests in qemu and says why; an explicit kvm host
// is refused.
func TestAutoFallsBackWhenKVMProbeFails(t *testing.T) {
	t.Parallel()
	setup := func(f *faults) {
		f.caps = offerKVM(t)
		f.add(&fault{op: "conn.DomainCreateXML", kind: faultError, err: kvmDenied})
	}
	b, _, logs := newFaultBackend(t, nil, setup)
	hs := b.Hosts(context.Background())
	if !hs[0].Connected || hs[0].DomainType != "qemu" || !strings.Contains(hs[0].DomainTypeNote, "Could not access KVM kernel module") {
		t.Fatalf("auto host %+v", hs[0])
	}
	if !strings.Contains(logs.String(), "kvm is offered but QEMU cannot use it") {
		t.Fatalf("fallback not logged:\n%s", logs)
	}
	strict, _, _ := newFaultBackend(t, func(c *Config) { c.DomainType = DomainTypeKVM }, setup)
	if err := strict.ZoneReady("z1"); err == nil || !strings.Contains(err.Error(), "--domain-type=kvm: QEMU cannot use KVM on this host") {
		t.Fatalf("explicit kvm host: %v", err)
	}
}

// TestCreateFallsBackToQEMUWhenKVMStartFails: an auto host settled on kvm
// (its probe failed for a reason that is not KVM's: the test driver
// refuses the probe's flags), then a start fails because QEMU cannot use
// KVM. The host switches to qemu, the domain is redefined as qemu and
// started, and the Create succeeds.
func TestCreateFallsBackToQEMUWhenKVMStartFails(t *testing.T) {
	t.Parallel()
	b, f, logs := newFaultBackend(t, nil, func(f *faults) { f.caps = offerKVM(t) })
	if got := b.DomainType("z1"); got != "kvm" {
		t.Fatalf("domain type %q, want kvm", got)
	}
	name := meta.DomainName(b.cfg.Provider, "m1")
	r := f.add(&fault{op: "dom.Create", name: name, nth: 1, kind: faultError, err: kvmDenied})
	pl := mustCreate(t, b, "m1")
	if f.hits(r) != 1 {
		t.Fatal("the start fault did not fire")
	}
	if x := domainXML(t, testConn(t, b, "z1"), pl.Domain); x.Type != "qemu" {
		t.Fatalf("domain type in the definition %q, want qemu", x.Type)
	}
	defines := 0
	for _, m := range f.mutations() {
		if m == "conn.DomainDefineXML "+name {
			defines++
		}
	}
	if defines != 2 {
		t.Fatalf("defines %d, want the kvm one and the qemu redefinition: %q", defines, f.mutations())
	}
	hs := b.Hosts(context.Background())
	if hs[0].DomainType != "qemu" || !strings.Contains(hs[0].DomainTypeNote, "Could not access KVM kernel module") {
		t.Fatalf("host after fallback %+v", hs[0])
	}
	if !strings.Contains(logs.String(), "a kvm guest could not start") {
		t.Fatalf("fallback not logged:\n%s", logs)
	}
}
