package volume

import (
	"fmt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/rollback"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// Store is the backend's pool as configured, on whichever host's
// connection it is given: the pool's name, the golden image that is never
// deleted, and the --base-user-data file seeds are built from ("" for
// none).
type Store struct {
	Pool, Golden, UserData string
}

// DeleteIn deletes a volume of the pool by name on conn (never the
// golden one); a volume that is not there is done.
func (s Store) DeleteIn(conn virt.Conn, vol string) error {
	pool, err := conn.LookupStoragePoolByName(s.Pool)
	if err != nil {
		return fmt.Errorf("storage pool %s: %w", s.Pool, err)
	}
	defer pool.Free()
	return Delete(pool, vol, s.Golden)
}

// Names names every volume of the pool on conn (nil when it cannot be
// read: a listing goes on without them).
func (s Store) Names(conn virt.Conn) []string {
	pool, err := conn.LookupStoragePoolByName(s.Pool)
	if err != nil {
		return nil
	}
	defer pool.Free()
	names, err := pool.VolumeNames()
	if err != nil {
		return nil
	}
	return names
}

// EnsureSeed serves --base-user-data to the guest as a NoCloud seed: an
// ISO 9660 image labelled "cidata" with user-data and meta-data, uploaded
// into a raw volume "<domain>-seed.iso" (SeedName) of pool on conn, and
// attached read-only. Without the file it does nothing. A seed left by an
// earlier attempt for the same domain is reused (its content depends only
// on the file and the domain name); one made here pushes its deletion on
// undo before the upload.
func (s Store) EnsureSeed(conn virt.Conn, pool virt.Pool, name, domain string, undo *rollback.Stack) (string, error) {
	if s.UserData == "" {
		return "", nil
	}
	if vol, err := pool.LookupStorageVolByName(name); err == nil {
		defer vol.Free()
		return vol.GetPath()
	} else if !isNoVolume(err) {
		return "", err
	}
	iso, err := BuildSeedISO(s.UserData, domain)
	if err != nil {
		return "", err
	}
	vol, err := CreateRaw(pool, name, uint64(len(iso)))
	if err != nil {
		return "", err
	}
	defer vol.Free()
	undo.Push("delete seed volume", func() error { return s.DeleteIn(conn, name) })
	if err := conn.UploadVolume(vol, iso); err != nil {
		return "", fmt.Errorf("upload: %w", err)
	}
	return vol.GetPath()
}
