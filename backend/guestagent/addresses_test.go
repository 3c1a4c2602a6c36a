package guestagent

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

const interfacesReply = `{"return":[
 {"name":"lo","hardware-address":"00:00:00:00:00:00","ip-addresses":[
   {"ip-address-type":"ipv4","ip-address":"127.0.0.1","prefix":8},
   {"ip-address-type":"ipv6","ip-address":"::1","prefix":128}],
  "statistics":{"rx-bytes":1}},
 {"name":"eth0","hardware-address":"52:54:00:12:34:56","ip-addresses":[
   {"ip-address-type":"ipv4","ip-address":"192.168.122.10","prefix":24},
   {"ip-address-type":"ipv6","ip-address":"fe80::5054:ff:fe12:3456%eth0","prefix":64},
   {"ip-address-type":"ipv6","ip-address":"2001:db8::10","prefix":64},
   {"ip-address-type":"ipv4","ip-address":"169.254.3.4","prefix":16},
   {"ip-address-type":"ipv4","ip-address":"not-an-ip","prefix":24},
   {"ip-address-type":"ipv4","ip-address":"10.0.0.1","prefix":40}]},
 {"name":"eth1"}
]}`

func TestDecodeAddresses(t *testing.T) {
	t.Parallel()
	got, err := decodeAddresses([]byte(interfacesReply))
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, a := range got {
		s = append(s, a.String())
	}
	want := []string{"eth0 192.168.122.10/24", "eth0 2001:db8::10/64"}
	if !slices.Equal(s, want) {
		t.Fatalf("addresses = %q, want %q", s, want)
	}
}

func TestDecodeAddressesMalformed(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{``, `{"return":{}}`, `{"return":[{"ip-addresses":{}}]}`, `[]`} {
		if got, err := decodeAddresses([]byte(raw)); err == nil {
			t.Errorf("decodeAddresses(%q) = %v, want an error", raw, got)
		}
	}
	got, err := decodeAddresses([]byte(`{"return":[]}`))
	if err != nil || len(got) != 0 {
		t.Fatalf("empty list: %v, %v", got, err)
	}
}

func TestAddressesSendsTypedRequest(t *testing.T) {
	t.Parallel()
	var sent string
	c := NewClient(TransportFunc(func(_ context.Context, req []byte, _ time.Duration) ([]byte, error) {
		sent = string(req)
		return []byte(interfacesReply), nil
	}))
	got, err := c.Addresses(t.Context())
	if err != nil || len(got) != 2 {
		t.Fatalf("Addresses = %v, %v", got, err)
	}
	if sent != `{"execute":"guest-network-get-interfaces"}` {
		t.Fatalf("request = %s", sent)
	}
}

func TestAddressesRefusedIsAgentError(t *testing.T) {
	t.Parallel()
	c := NewClient(TransportFunc(func(context.Context, []byte, time.Duration) ([]byte, error) {
		return []byte(`{"error":{"class":"GenericError","desc":"The command guest-network-get-interfaces has been disabled for this instance"}}`), nil
	}))
	_, err := c.Addresses(t.Context())
	if !IsAgentError(err) || IsAgentUnavailable(err) {
		t.Fatalf("err = %v, want an agent error", err)
	}
}

func TestAddressesBoundedByTimeout(t *testing.T) {
	t.Parallel()
	c := NewClient(TransportFunc(func(ctx context.Context, _ []byte, _ time.Duration) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}), WithTimeout(20*time.Millisecond))
	start := time.Now()
	_, err := c.Addresses(t.Context())
	if !errors.Is(err, ErrAgentUnavailable) {
		t.Fatalf("err = %v, want unavailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s", d)
	}
}

// FuzzDecodeAddresses: arbitrary bytes never panic, and every address that
// comes back is usable and carries a valid prefix.
func FuzzDecodeAddresses(f *testing.F) {
	f.Add([]byte(interfacesReply))
	for _, s := range replySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := decodeAddresses(raw)
		if err != nil && got != nil {
			t.Fatalf("both addresses and error: %v, %v", got, err)
		}
		for _, a := range got {
			if !a.Prefix.IsValid() || !usable(a.Prefix.Addr()) || a.Prefix.Addr().Zone() != "" {
				t.Fatalf("decoded unusable address %v from %q", a, raw)
			}
		}
	})
}
