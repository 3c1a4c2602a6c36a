package meta

import (
	"fmt"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// Read returns our metadata element of dom, decoded. found is false
// when the domain carries none (a stranger's domain).
func Read(dom virt.Domain) (md Metadata, found bool, err error) {
	s, err := dom.GetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, NS, libvirt.DOMAIN_AFFECT_CURRENT)
	if isNoMetadata(err) {
		return Metadata{}, false, nil
	}
	if err != nil {
		return Metadata{}, false, err
	}
	md, err = Decode(s)
	if err != nil {
		return Metadata{}, true, err
	}
	return md, true, nil
}

// ReadOwned checks that dom (named name) is provider's domain for
// machineID and returns its metadata; otherwise an error wrapping
// backend.ErrNotOurs, or backend.ErrNewerTerm when a newer leader wrote
// it (term.go). Every operation that changes a domain asks it first,
// in the same lookup as its change.
func ReadOwned(dom virt.Domain, name, provider, machineID string) (Metadata, error) {
	md, found, err := Read(dom)
	switch {
	case err != nil && !found:
		return Metadata{}, fmt.Errorf("read metadata of %s: %w", name, err)
	case err != nil:
		return Metadata{}, fmt.Errorf("domain %s: unreadable bigfleet metadata (%v): %w", name, err, backend.ErrNotOurs)
	case !found:
		return Metadata{}, fmt.Errorf("domain %s has no bigfleet metadata: %w", name, backend.ErrNotOurs)
	case !md.Owned(provider, machineID):
		return Metadata{}, fmt.Errorf("domain %s belongs to provider %q machine %q: %w", name, md.Provider, md.MachineID, backend.ErrNotOurs)
	}
	if err := CheckTerm(name, md); err != nil {
		return Metadata{}, err
	}
	return md, nil
}

// WriteOwned writes md on dom after checking again, on the same handle,
// that dom (named name) is provider's domain for md.MachineID: a domain
// redefined by someone else since it was read is never written.
func WriteOwned(dom virt.Domain, name, provider string, md Metadata) error {
	if _, err := ReadOwned(dom, name, provider, md.MachineID); err != nil {
		return err
	}
	return Write(dom, md)
}

// Write replaces our element on dom, in the persistent definition
// and, while it runs, the live one too, so both agree. It carries the
// leader's term (Stamped).
func Write(dom virt.Domain, md Metadata) error {
	s, err := Stamped(md).Marshal(false)
	if err != nil {
		return err
	}
	flags := libvirt.DOMAIN_AFFECT_CONFIG
	if active, err := dom.IsActive(); err == nil && active {
		flags |= libvirt.DOMAIN_AFFECT_LIVE
	}
	err = dom.SetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, s, Prefix, NS, flags)
	if err != nil && flags&libvirt.DOMAIN_AFFECT_LIVE != 0 && virt.IsCode(err, libvirt.ERR_OPERATION_INVALID) {
		// A transient domain (started from XML, never defined) has no
		// persistent config: its live definition is all there is.
		return dom.SetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, s, Prefix, NS, libvirt.DOMAIN_AFFECT_LIVE)
	}
	return err
}

func isNoMetadata(err error) bool { return virt.IsCode(err, libvirt.ERR_NO_DOMAIN_METADATA) }
