package guestagent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
)

const cmdNetworkGetInterfaces = "guest-network-get-interfaces"

// netInterface mirrors qemu-ga's GuestNetworkInterface; only the members the
// provider reads are declared (encoding/json ignores the rest, such as
// "statistics").
type netInterface struct {
	Name            string      `json:"name"`
	HardwareAddress string      `json:"hardware-address"`
	IPAddresses     []ipAddress `json:"ip-addresses"`
}

// ipAddress mirrors GuestIpAddress.
type ipAddress struct {
	Type    string `json:"ip-address-type"` // "ipv4" | "ipv6"
	Address string `json:"ip-address"`
	Prefix  int    `json:"prefix"`
}

// Address is one usable address of the guest: an interface name and the
// address with its prefix length.
type Address struct {
	Interface string
	Prefix    netip.Prefix
}

// String is "eth0 192.0.2.10/24".
func (a Address) String() string { return a.Interface + " " + a.Prefix.String() }

// Addresses asks the agent for the guest's network interfaces
// (guest-network-get-interfaces, bounded by the per-command timeout) and
// returns their global addresses: loopback, link-local, unspecified and
// multicast addresses are skipped. An agent that refuses the command (blocked
// by --block-rpcs or --allow-rpcs) answers with an *AgentError, which the
// caller can tell apart with IsAgentError.
func (c *Client) Addresses(ctx context.Context) ([]Address, error) {
	raw, err := c.roundTrip(ctx, cmdNetworkGetInterfaces, nil)
	if err != nil {
		return nil, err
	}
	addrs, err := decodeAddresses(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmdNetworkGetInterfaces, err)
	}
	return addrs, nil
}

// decodeAddresses turns a guest-network-get-interfaces reply into the
// guest's usable addresses, in the agent's order, without duplicates. An
// address the agent spells wrongly or with an impossible prefix is skipped,
// not fatal: one odd interface must not hide the others.
func decodeAddresses(raw []byte) ([]Address, error) {
	var ifs []netInterface
	if err := decodeReturn(raw, &ifs); err != nil {
		return nil, err
	}
	var out []Address
	for _, ifc := range ifs {
		for _, ip := range ifc.IPAddresses {
			a, err := netip.ParseAddr(ip.Address)
			if err != nil {
				continue
			}
			a = a.WithZone("") // fe80::1%eth0: the zone is the interface
			if !usable(a) || ip.Prefix < 0 || ip.Prefix > a.BitLen() {
				continue
			}
			p := netip.PrefixFrom(a, ip.Prefix) // keeps the host bits
			got := Address{Interface: ifc.Name, Prefix: p}
			if !slices.Contains(out, got) {
				out = append(out, got)
			}
		}
	}
	return out, nil
}

// usable reports whether an address is one a person would reach the guest
// on: not loopback, link-local, unspecified or multicast.
func usable(a netip.Addr) bool {
	return a.IsValid() && !a.IsLoopback() && !a.IsLinkLocalUnicast() &&
		!a.IsUnspecified() && !a.IsMulticast() && !a.IsInterfaceLocalMulticast()
}
