package libvirt

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/guest"
)

func TestGuestAddresses(t *testing.T) {
	t.Parallel()
	b, logs := newTestBackend(t, nil)
	pl := mustCreate(t, b, "m1")
	var sent string
	b.guests.Transport = func(guest.Target) guestagent.Transport {
		return guestagent.TransportFunc(func(_ context.Context, req []byte, _ time.Duration) ([]byte, error) {
			sent = string(req)
			return []byte(`{"return":[{"name":"lo","ip-addresses":[{"ip-address-type":"ipv4","ip-address":"127.0.0.1","prefix":8}]},
{"name":"eth0","ip-addresses":[{"ip-address-type":"ipv4","ip-address":"192.168.122.7","prefix":24},
{"ip-address-type":"ipv6","ip-address":"fe80::1","prefix":64}]}]}`), nil
		})
	}
	got, err := b.GuestAddresses(t.Context(), "m1", pl)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"eth0 192.168.122.7/24"}; !slices.Equal(got, want) {
		t.Fatalf("addresses = %q, want %q", got, want)
	}
	if !strings.Contains(sent, "guest-network-get-interfaces") {
		t.Fatalf("sent %s", sent)
	}
	if strings.Contains(logs.String(), "192.168.122.7") {
		t.Fatal("addresses logged")
	}
}

func TestGuestAddressesRefusedIsUnknownWithOneWarn(t *testing.T) {
	t.Parallel()
	b, logs := newTestBackend(t, nil)
	pl := mustCreate(t, b, "m1")
	b.guests.Transport = func(guest.Target) guestagent.Transport {
		return guestagent.TransportFunc(func(context.Context, []byte, time.Duration) ([]byte, error) {
			return nil, &guestagent.AgentError{Class: "GenericError", Desc: "command guest-network-get-interfaces has been disabled"}
		})
	}
	got, err := b.GuestAddresses(t.Context(), "m1", pl)
	if err != nil || got != nil {
		t.Fatalf("refused agent: %v, %v; want nil, nil", got, err)
	}
	if n := strings.Count(logs.String(), "refused guest-network-get-interfaces"); n != 1 {
		t.Fatalf("%d WARN lines, want 1:\n%s", n, logs)
	}
}

func TestGuestAddressesUnanswered(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	pl := mustCreate(t, b, "m1")
	b.guests.Transport = func(guest.Target) guestagent.Transport {
		return guestagent.TransportFunc(func(context.Context, []byte, time.Duration) ([]byte, error) {
			return nil, guestagent.ErrAgentUnavailable
		})
	}
	if _, err := b.GuestAddresses(t.Context(), "m1", pl); !guestagent.IsAgentUnavailable(err) {
		t.Fatalf("err = %v, want agent unavailable", err)
	}
}
