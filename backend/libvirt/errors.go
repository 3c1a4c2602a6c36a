package libvirt

import (
	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
)

// Classification happens once, in hostconn (errors.As on libvirt.Error);
// these are the backend's names for it.
var (
	isCode  = hostconn.IsCode
	message = hostconn.Message
)

func isNoDomain(err error) bool { return isCode(err, libvirt.ERR_NO_DOMAIN) }
func isNoVolume(err error) bool { return isCode(err, libvirt.ERR_NO_STORAGE_VOL) }

// isNotRunning: destroying a domain that is already off is not a failure.
func isNotRunning(err error) bool { return isCode(err, libvirt.ERR_OPERATION_INVALID) }
