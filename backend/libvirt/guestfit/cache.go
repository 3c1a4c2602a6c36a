package guestfit

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// Source is what a host answers about its QEMU (virt.Conn has both).
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

// Verdict is one host's answer for a guest.
type Verdict struct {
	// Refused says why the host cannot run the guest ("" if it can).
	Refused string
	// Unchecked names what could not be judged and why (the CPU, where
	// the host does not answer domain capabilities): the migration call
	// then decides, as it did before this check.
	Unchecked string
}

// Refuses judges whether the host, reached on src over the connection
// link (its time of connection), can run g under domain type virtType.
// An error means its capabilities could not be read: the host cannot be
// judged at all (the caller names it so, with the cause).
func (c *Cache) Refuses(link time.Time, src Source, g Guest, virtType string) (Verdict, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if link.IsZero() || !link.Equal(c.link) {
		c.link, c.caps, c.cpus = link, nil, nil
	}
	if c.caps == nil {
		caps, err := readCaps(src)
		if err != nil {
			return Verdict{}, err
		}
		c.caps = caps
	}
	if why := MachinesOf(c.caps, g.Arch, virtType).refuses(g.Machine); why != "" {
		return Verdict{Refused: why}, nil
	}
	if g.CPUMode == "" {
		return Verdict{}, nil
	}
	cpus, err := c.cpusFor(src, cpuKey{g.Arch, g.Machine, virtType})
	if err != nil {
		return Verdict{}, err
	}
	return Verdict{Refused: cpus.refuses(g), Unchecked: cpus.Unchecked}, nil
}

// cpusFor reads (once per connection and key) the domain capabilities
// of the guest's machine type.
func (c *Cache) cpusFor(src Source, k cpuKey) (CPUs, error) {
	if cpus, ok := c.cpus[k]; ok {
		return cpus, nil
	}
	var cpus CPUs
	x, err := src.GetDomainCapabilities("", k.arch, k.machine, k.virtType, 0)
	switch {
	case unanswered(err):
		// libvirt checks connect.write for domain capabilities (it may
		// probe QEMU), which the shipped polkit rule rightly denies the
		// provider on libssh hosts; the test driver has none. The CPU
		// stays unjudged there; the machine type, from the
		// capabilities (connect.read), is still checked.
		cpus.Unchecked = "the CPU (domain capabilities: " + message(err) + ")"
	case err != nil:
		return CPUs{}, fmt.Errorf("read domain capabilities (%s, machine %s, %s): %w", orNone(k.arch), orNone(k.machine), k.virtType, err)
	default:
		var dc libvirtxml.DomainCaps
		if err := dc.Unmarshal(x); err != nil {
			return CPUs{}, fmt.Errorf("parse domain capabilities: %w", err)
		}
		cpus = CPUsOf(&dc)
	}
	if c.cpus == nil {
		c.cpus = map[cpuKey]CPUs{}
	}
	c.cpus[k] = cpus
	return cpus, nil
}

// unanswered: the host will not say (no such API in its driver, or its
// access control denies it), which no retry changes.
func unanswered(err error) bool {
	lerr, ok := errors.AsType[libvirt.Error](err)
	return ok && (lerr.Code == libvirt.ERR_NO_SUPPORT || lerr.Code == libvirt.ERR_ACCESS_DENIED || lerr.Code == libvirt.ERR_OPERATION_DENIED)
}

func message(err error) string {
	if lerr, ok := errors.AsType[libvirt.Error](err); ok {
		return lerr.Message
	}
	return err.Error()
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
