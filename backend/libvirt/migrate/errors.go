package migrate

import (
	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

func isNoDomain(err error) bool { return virt.IsCode(err, libvirt.ERR_NO_DOMAIN) }
func isNoVolume(err error) bool { return virt.IsCode(err, libvirt.ERR_NO_STORAGE_VOL) }
