package libvirt

import (
	"errors"
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
)

// golden describes the image overlays are backed by.
type golden struct {
	Path     string
	Format   string // from the image's own volume XML: never assumed
	Capacity uint64 // bytes; overlays get the same virtual size
	// Identity is what a migration compares to decide that two hosts'
	// golden images are the same content (goldenIdentity).
	Identity string
}

// readGolden looks the golden image up in pool and reads its path, format
// and capacity.
func readGolden(pool hostconn.Pool, name string) (golden, error) {
	vol, err := pool.LookupStorageVolByName(name)
	if err != nil {
		return golden{}, fmt.Errorf("volume %q: %w", name, err)
	}
	defer vol.Free()
	x, err := volumeXML(vol)
	if err != nil {
		return golden{}, fmt.Errorf("volume %q: %w", name, err)
	}
	g := golden{Format: "raw"}
	if x.Target != nil {
		g.Path = x.Target.Path
		if x.Target.Format != nil && x.Target.Format.Type != "" {
			g.Format = x.Target.Format.Type
		}
	}
	if g.Path == "" {
		if g.Path, err = vol.GetPath(); err != nil {
			return golden{}, fmt.Errorf("volume %q: path: %w", name, err)
		}
	}
	info, err := vol.GetInfo()
	if err != nil {
		return golden{}, fmt.Errorf("volume %q: info: %w", name, err)
	}
	g.Capacity = info.Capacity
	g.Identity = goldenIdentity(x, info)
	return g, nil
}

func volumeXML(vol hostconn.Volume) (*libvirtxml.StorageVolume, error) {
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

// overlayXML is a qcow2 volume whose backing store is the golden image.
func overlayXML(name string, g golden) (string, error) {
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

var errForeignVolume = errors.New("volume exists but is not an overlay of the golden image")

// ensureOverlay creates the overlay, or reuses one a previous attempt for
// the same domain left behind if it is backed by the golden image. created
// says whether this call made it (only then may a rollback delete it).
func ensureOverlay(pool hostconn.Pool, name string, g golden) (path string, created bool, err error) {
	vol, err := pool.LookupStorageVolByName(name)
	if err == nil {
		defer vol.Free()
		x, err := volumeXML(vol)
		if err != nil {
			return "", false, err
		}
		if x.BackingStore == nil || x.BackingStore.Path != g.Path {
			return "", false, fmt.Errorf("%q: %w", name, errForeignVolume)
		}
		path, err := vol.GetPath()
		return path, false, err
	}
	if !isNoVolume(err) {
		return "", false, err
	}
	s, err := overlayXML(name, g)
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

// errGolden guards the one volume we must never delete.
var errGolden = errors.New("refusing to delete the golden image")

// deleteVolume deletes name from pool; a missing volume is fine. It refuses
// the golden image whatever the caller asked.
func deleteVolume(pool hostconn.Pool, name, goldenName string) error {
	if name == goldenName {
		return fmt.Errorf("%q: %w", name, errGolden)
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

// createPlainVolume makes a qcow2 volume of capacity bytes with no backing
// file (the destination of a whole-disk copy) and returns its path.
func createPlainVolume(pool hostconn.Pool, name string, capacity uint64) (string, error) {
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
