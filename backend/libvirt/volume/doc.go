// Package volume is the storage a machine owns in the pool: the golden
// image overlays are backed by (Golden, ReadGolden, and the identity a
// migration compares), the copy-on-write overlay (EnsureOverlay), a plain
// volume for a whole-disk copy (CreatePlain), the NoCloud seed ISO
// (BuildSeedISO, CreateRaw) and deletion that never touches the golden
// image (Delete). It works on a pool handle (virt.Pool) and needs no
// Backend.
package volume

import (
	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

func isNoVolume(err error) bool { return virt.IsCode(err, libvirt.ERR_NO_STORAGE_VOL) }
