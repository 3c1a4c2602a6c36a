package hostconn

import (
	"errors"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"
)

func TestDecideDomainType(t *testing.T) {
	t.Parallel()
	denied := libvirt.Error{Code: libvirt.ERR_INTERNAL_ERROR,
		Message: "process exited while connecting to monitor: Could not access KVM kernel module: Permission denied"}
	acl := errors.New("access denied by policy")
	for _, tc := range []struct {
		name, mode string
		offered    []string
		probe      error
		want       TypeChoice
		wantErr    string // substring; "" = no error
		probed     bool
	}{
		{name: "auto, kvm works", mode: "", offered: []string{"qemu", "kvm"}, want: TypeChoice{Type: "kvm"}, probed: true},
		{name: "auto, kvm unusable", mode: DomainTypeAuto, offered: []string{"qemu", "kvm"}, probe: denied,
			want: TypeChoice{Type: "qemu", Fallback: denied.Message}, probed: true},
		{name: "auto, probe fails for another reason", mode: DomainTypeAuto, offered: []string{"qemu", "kvm"}, probe: acl,
			want: TypeChoice{Type: "kvm"}, probed: true},
		{name: "auto, no kvm", mode: DomainTypeAuto, offered: []string{"qemu"}, want: TypeChoice{Type: "qemu"}},
		{name: "auto, test driver", mode: DomainTypeAuto, offered: []string{"test"}, want: TypeChoice{Type: "test"}},
		{name: "auto, nothing", mode: DomainTypeAuto, wantErr: "offer no hvm domain type"},
		{name: "kvm works", mode: DomainTypeKVM, offered: []string{"qemu", "kvm"}, want: TypeChoice{Type: "kvm"}, probed: true},
		{name: "kvm unusable", mode: DomainTypeKVM, offered: []string{"qemu", "kvm"}, probe: denied,
			wantErr: "--domain-type=kvm: QEMU cannot use KVM on this host: ", probed: true},
		{name: "kvm not offered", mode: DomainTypeKVM, offered: []string{"qemu"}, wantErr: "--domain-type=kvm: the host does not offer kvm (offers: qemu)"},
		{name: "qemu with kvm offered", mode: DomainTypeQEMU, offered: []string{"qemu", "kvm"}, want: TypeChoice{Type: "qemu"}},
		{name: "qemu not offered", mode: DomainTypeQEMU, offered: []string{"test"}, wantErr: "--domain-type=qemu: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			probed := false
			got, err := decideDomainType(tc.mode, tc.offered, func() error { probed = true; return tc.probe })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
			} else if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
			if probed != tc.probed {
				t.Errorf("probed = %v, want %v", probed, tc.probed)
			}
		})
	}
}

func TestValidDomainType(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "auto", "kvm", "qemu"} {
		if err := ValidDomainType(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"KVM", "tcg", "xen"} {
		if err := ValidDomainType(bad); err == nil || !strings.Contains(err.Error(), "--domain-type") {
			t.Errorf("%q: err = %v, want one naming --domain-type", bad, err)
		}
	}
}

func TestIsKVMUnusable(t *testing.T) {
	t.Parallel()
	for _, m := range []string{
		"internal error: process exited while connecting to monitor: Could not access KVM kernel module: Permission denied",
		"qemu-system-x86_64: failed to initialize kvm: Permission denied",
		"unsupported configuration: domain type 'kvm' ... does not support virt type 'kvm'",
	} {
		if !IsKVMUnusable(libvirt.Error{Code: libvirt.ERR_INTERNAL_ERROR, Message: m}) {
			t.Errorf("not recognised: %s", m)
		}
	}
	for _, err := range []error{nil, errors.New("no space left on device"), libvirt.Error{Code: libvirt.ERR_OPERATION_DENIED, Message: "access denied"}} {
		if IsKVMUnusable(err) {
			t.Errorf("recognised as kvm failure: %v", err)
		}
	}
}
