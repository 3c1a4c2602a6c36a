package volume

import (
	"fmt"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// GoldenIdentity identifies a golden image's content for a migration:
// its format, virtual size, physical size and modification time with
// nanoseconds, as libvirt reports them in the volume's XML. It costs one
// call per host and reads none of the image (a checksum would read
// gigabytes per migration, or need a cache that must itself be trusted).
// It errs only to the safe side: the same image copied to another host
// without keeping its mtime (cp -p, rsync -t do) differs, and the
// migration then copies the whole disk (slower, never wrong); a false
// match needs identical sizes and a modification time copied to the
// nanosecond, i.e. an operator who distributed the file as a copy. The
// name alone is never trusted: a golden image of the same name but other
// content under an overlay copied incrementally (NON_SHARED_INC) would be
// silent disk corruption.
func GoldenIdentity(x *libvirtxml.StorageVolume, info *libvirt.StorageVolInfo) string {
	format, mtime, physical := "raw", "", uint64(0)
	if x.Target != nil {
		if x.Target.Format != nil && x.Target.Format.Type != "" {
			format = x.Target.Format.Type
		}
		if x.Target.Timestamps != nil {
			mtime = x.Target.Timestamps.Mtime
		}
	}
	if x.Physical != nil {
		physical = x.Physical.Value
	}
	if mtime == "" {
		return "" // no identity: never equal to anything
	}
	return fmt.Sprintf("%s/%d/%d/%s", format, info.Capacity, physical, mtime)
}

// SameGolden reads the golden image (image, by name) the source's overlay
// ovName is backed by and the destination's golden image, and says whether
// the destination's may back an overlay copied incrementally; why says why
// not.
func SameGolden(spool, dpool virt.Pool, image, ovName string) (g Golden, why string) {
	src, err := ReadGolden(spool, image)
	if err != nil {
		return Golden{}, fmt.Sprintf("the source's golden image: %v", err)
	}
	if back, err := BackingPath(spool, ovName); err != nil || back != src.Path {
		return Golden{}, fmt.Sprintf("the overlay is not backed by the source's golden image %s (%q, %v)", src.Path, back, err)
	}
	dst, err := ReadGolden(dpool, image)
	if err != nil {
		return Golden{}, fmt.Sprintf("no golden image %s on the destination: %v", image, err)
	}
	if src.Identity == "" || src.Identity != dst.Identity {
		return Golden{}, fmt.Sprintf("the golden images differ (source %q, destination %q)", src.Identity, dst.Identity)
	}
	return dst, ""
}

// BackingPath is the backing file of volume name as its pool reports it
// ("" for none).
func BackingPath(pool virt.Pool, name string) (string, error) {
	vol, err := pool.LookupStorageVolByName(name)
	if err != nil {
		return "", err
	}
	defer vol.Free()
	x, err := XML(vol)
	if err != nil {
		return "", err
	}
	if x.BackingStore == nil {
		return "", nil
	}
	return x.BackingStore.Path, nil
}
