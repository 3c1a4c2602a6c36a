package guestfit

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// Source is what a host answers about its QEMU (hostconn.Conn has both).
type Source interface {
	GetCapabilities() (string, error)
	GetDomainCapabilities(emulatorbin, arch, machine, virttype string, flags libvirt.ConnectGetDomainCapabilitiesFlags) (string, error)
}

// Cache keeps one host's answers for the connection they were read on:
// what QEMU offers changes only with a new daemon or a new QEMU, which
// means a new connection (a reconnect reads them again). Capabilities
// are large and domain capabilities make libvirt probe QEMU, so a
// migration must not ask every host of a zone anew. The zero value is
// ready; it is safe for concurrent use.
type Cache struct {
	mu   sync.Mutex
	link time.Time // the connection's identity (hostconn.Host.Link)
	caps *libvirtxml.Caps
	cpus map[cpuKey]CPUs
}

type cpuKey struct{ arch, machine, virtType string }

// Refuses says why the host, reached on src over the connection link
// (its time of connection), cannot run g under domain type virtType;
// "" when it can. An error means its facts could not be read: the host
// cannot be judged (the caller names it so, with the cause).
func (c *Cache) Refuses(link time.Time, src Source, g Guest, virtType string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if link.IsZero() || !link.Equal(c.link) {
		c.link, c.caps, c.cpus = link, nil, nil
	}
	if c.caps == nil {
		caps, err := readCaps(src)
		if err != nil {
			return "", err
		}
		c.caps = caps
	}
	if why := MachinesOf(c.caps, g.Arch, virtType).refuses(g.Machine); why != "" {
		return why, nil
	}
	if g.CPUMode == "" {
		return "", nil
	}
	cpus, err := c.cpusFor(src, cpuKey{g.Arch, g.Machine, virtType})
	if err != nil {
		return "", err
	}
	return cpus.refuses(g), nil
}

// cpusFor reads (once per connection and key) the domain capabilities
// of the guest's machine type.
func (c *Cache) cpusFor(src Source, k cpuKey) (CPUs, error) {
	if cpus, ok := c.cpus[k]; ok {
		return cpus, nil
	}
	x, err := src.GetDomainCapabilities("", k.arch, k.machine, k.virtType, 0)
	if lerr, ok := errors.AsType[libvirt.Error](err); ok && lerr.Code == libvirt.ERR_NO_SUPPORT {
		// A driver without domain capabilities (the test driver) cannot
		// say; the migration call will, as it did before this check.
		x, err = "<domainCapabilities/>", nil
	}
	if err != nil {
		return CPUs{}, fmt.Errorf("read domain capabilities (%s, machine %s, %s): %w", orNone(k.arch), orNone(k.machine), k.virtType, err)
	}
	var dc libvirtxml.DomainCaps
	if err := dc.Unmarshal(x); err != nil {
		return CPUs{}, fmt.Errorf("parse domain capabilities: %w", err)
	}
	if c.cpus == nil {
		c.cpus = map[cpuKey]CPUs{}
	}
	c.cpus[k] = CPUsOf(&dc)
	return c.cpus[k], nil
}

func readCaps(src Source) (*libvirtxml.Caps, error) {
	s, err := src.GetCapabilities()
	if err != nil {
		return nil, fmt.Errorf("read capabilities: %w", err)
	}
	var caps libvirtxml.Caps
	if err := caps.Unmarshal(s); err != nil {
		return nil, fmt.Errorf("parse capabilities: %w", err)
	}
	return &caps, nil
}
