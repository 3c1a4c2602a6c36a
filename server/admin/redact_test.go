package admin_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
)

func TestRedactURI(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                "",
		"qemu:///system":  "qemu:///system",
		"test:///default": "test:///default",
		"qemu+tls://host.example/system?pkipath=/etc/pki/secret":                            "qemu+tls://host.example/system",
		"qemu+libssh://admin:hunter2@kvm1:2222/system?keyfile=/root/.ssh/id&known_hosts=/k": "qemu+libssh://kvm1:2222/system",
		"qemu+ssh://root@kvm2/system#frag":                                                  "qemu+ssh://kvm2/system",
		"qemu+ssh://u:p%zz@kvm3/system?k=v":                                                 "qemu+ssh://kvm3/system", // unparseable escape
		"qemu+ssh://u:pa@ss@kvm4/system?x=1":                                                "qemu+ssh://kvm4/system",
		"qemu+ssh://u:s3cret@[::1]:22/system":                                               "qemu+ssh://[::1]:22/system",
	} {
		if got := admin.RedactURI(in); got != want {
			t.Errorf("RedactURI(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzRedactURI(f *testing.F) {
	f.Add("qemu+ssh://user:secret@host/system?keyfile=secret")
	f.Add("qemu+ssh://u:p%zz@kvm3/system?k=secret")
	f.Fuzz(func(t *testing.T, pass string) {
		if len(pass) < 4 || strings.ContainsAny(pass, "@/?#:[]%") {
			return
		}
		uri := "qemu+ssh://op:" + pass + "@kvm/system?keyfile=" + pass
		if got := admin.RedactURI(uri); strings.Contains(got, pass) && !strings.Contains("qemu+ssh://kvm/system", pass) {
			t.Fatalf("secret %q survives in %q", pass, got)
		}
	})
}

// leakyBackend reports URIs with credentials, as a careless backend might.
type leakyBackend struct{ backend.Backend }

func (b leakyBackend) Hosts(ctx context.Context) []backend.HostStatus {
	hs := b.Backend.Hosts(ctx)
	for i := range hs {
		hs[i].URI = "qemu+libssh://admin:hunter2@" + hs[i].Zone + "/system?keyfile=/secret/key"
		hs[i].PoolCapacity, hs[i].PoolAllocation = 100<<30, 25<<30
	}
	return hs
}

type leakyEngine struct{ *lifecycle.Engine }

func (e leakyEngine) Backend() backend.Backend { return leakyBackend{e.Engine.Backend()} }

// TestHostURIsRedactedOnTheWire: whatever the backend reports, ListHosts
// never carries userinfo or query strings.
func TestHostURIsRedactedOnTheWire(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{Wrap: func(e *lifecycle.Engine) admin.Engine { return leakyEngine{e} }})
	for _, p := range protocols {
		res, err := adminClient(s, p.opts).ListHosts(t.Context(), connect.NewRequest(&adminv1.ListHostsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range res.Msg.GetHosts() {
			if h.GetUri() != "qemu+libssh://"+h.GetZone()+"/system" || h.GetPoolCapacityBytes() != 100<<30 || h.GetPoolAllocationBytes() != 25<<30 {
				t.Errorf("%s: host = %v", p.name, h)
			}
		}
	}
}
