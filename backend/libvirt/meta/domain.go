package meta

import (
	"libvirt.org/go/libvirt"

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

// Write replaces our element on dom, in the persistent definition
// and, while it runs, the live one too, so both agree.
func Write(dom virt.Domain, md Metadata) error {
	s, err := md.Marshal(false)
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
