package volume

import (
	"errors"
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// Golden describes the image overlays are backed by.
type Golden struct {
	Path     string
	Format   string // from the image's own volume XML: never assumed
	Capacity uint64 // bytes; overlays get the same virtual size
	// Identity is what a migration compares to decide that two hosts'
	// golden images are the same content (GoldenIdentity).
	Identity string
}

// ReadGolden looks the golden image up in pool and reads its path, format
// and capacity.
func ReadGolden(pool virt.Pool, name string) (Golden, error) {
	vol, err := pool.LookupStorageVolByName(name)
	if err != nil {
		return Golden{}, fmt.Errorf("volume %q: %w", name, err)
	}
	defer vol.Free()
	x, err := XML(vol)
	if err != nil {
		return Golden{}, fmt.Errorf("volume %q: %w", name, err)
	}
	g := Golden{Format: "raw"}
	if x.Target != nil {
		g.Path = x.Target.Path
		if x.Target.Format != nil && x.Target.Format.Type != "" {
			g.Format = x.Target.Format.Type
		}
	}
	if g.Path == "" {
		if g.Path, err = vol.GetPath(); err != nil {
			return Golden{}, fmt.Errorf("volume %q: path: %w", name, err)
		}
	}
	info, err := vol.GetInfo()
	if err != nil {
		return Golden{}, fmt.Errorf("volume %q: info: %w", name, err)
	}
	g.Capacity = info.Capacity
	g.Identity = GoldenIdentity(x, info)
	return g, nil
}

// XML reads and parses a volume's XML description.
func XML(vol virt.Volume) (*libvirtxml.StorageVolume, error) {
	s, err := vol.GetXMLDesc(0)
	if err != nil {
		return nil, err
	}
	var x libvirtxml.StorageVolume
	if err := x.Unmarshal(s); err != nil {
		return nil, fmt.Errorf("parse volume xml: %w", err)
	}
	return &x, nil
}

// OverlayXML is a qcow2 volume whose backing store is the golden image.
func OverlayXML(name string, g Golden) (string, error) {
	v := libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: g.Capacity},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
		BackingStore: &libvirtxml.StorageVolumeBackingStore{
			Path:   g.Path,
			Format: &libvirtxml.StorageVolumeTargetFormat{Type: g.Format},
		},
	}
	return v.Marshal()
}

// ErrForeignVolume: a volume of the overlay's name that is not backed by the golden image.
var ErrForeignVolume = errors.New("volume exists but is not an overlay of the golden image")

// EnsureOverlay creates the overlay, or reuses one a previous attempt for
// the same domain left behind if it is backed by the golden image. created
// says whether this call made it (only then may a rollback delete it).
func EnsureOverlay(pool virt.Pool, name string, g Golden) (path string, created bool, err error) {
	vol, err := pool.LookupStorageVolByName(name)
	if err == nil {
		defer vol.Free()
		x, err := XML(vol)
		if err != nil {
			return "", false, err
		}
		if x.BackingStore == nil || x.BackingStore.Path != g.Path {
			return "", false, fmt.Errorf("%q: %w", name, ErrForeignVolume)
		}
		path, err := vol.GetPath()
		return path, false, err
	}
	if !isNoVolume(err) {
		return "", false, err
	}
	s, err := OverlayXML(name, g)
	if err != nil {
		return "", false, err
	}
	vol, err = pool.StorageVolCreateXML(s, 0)
	if err != nil {
		return "", false, err
	}
	defer vol.Free()
	path, err = vol.GetPath()
	if err != nil {
		return "", true, err
	}
	return path, true, nil
}

// ErrGolden guards the one volume we must never delete.
var ErrGolden = errors.New("refusing to delete the golden image")

// Delete deletes name from pool; a missing volume is fine. It refuses
// the golden image whatever the caller asked.
func Delete(pool virt.Pool, name, goldenName string) error {
	if name == goldenName {
		return fmt.Errorf("%q: %w", name, ErrGolden)
	}
	vol, err := pool.LookupStorageVolByName(name)
	if isNoVolume(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer vol.Free()
	if err := vol.Delete(0); err != nil && !isNoVolume(err) {
		return err
	}
	return nil
}

// CreatePlain makes a qcow2 volume of capacity bytes with no backing
// file (the destination of a whole-disk copy) and returns its path.
func CreatePlain(pool virt.Pool, name string, capacity uint64) (string, error) {
	s, err := (&libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: capacity},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
	}).Marshal()
	if err != nil {
		return "", err
	}
	vol, err := pool.StorageVolCreateXML(s, 0)
	if err != nil {
		return "", err
	}
	defer vol.Free()
	return vol.GetPath()
}

// PathSize reads a volume's path and virtual size.
func PathSize(pool virt.Pool, name string) (string, uint64, error) {
	vol, err := pool.LookupStorageVolByName(name)
	if err != nil {
		return "", 0, fmt.Errorf("volume %s: %w", name, err)
	}
	defer vol.Free()
	path, err := vol.GetPath()
	if err != nil {
		return "", 0, fmt.Errorf("volume %s: path: %w", name, err)
	}
	info, err := vol.GetInfo()
	if err != nil {
		return "", 0, fmt.Errorf("volume %s: info: %w", name, err)
	}
	return path, info.Capacity, nil
}
