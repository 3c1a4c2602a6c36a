package libvirt

import (
	"fmt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
)

// ensureSeed serves --base-user-data to the guest as a NoCloud seed: an ISO
// 9660 image labelled "cidata" with user-data and meta-data, uploaded into a
// raw volume "<domain>-seed.iso" and attached read-only. Without the flag it
// does nothing. A seed left by an earlier attempt for the same domain is
// reused (its content depends only on the file and the domain name).
func (b *Backend) ensureSeed(conn hostconn.Conn, pool hostconn.Pool, domain string, undo *rollback) (string, error) {
	if b.cfg.BaseUserData == "" {
		return "", nil
	}
	name := meta.SeedName(domain)
	if vol, err := pool.LookupStorageVolByName(name); err == nil {
		defer vol.Free()
		return vol.GetPath()
	} else if !isNoVolume(err) {
		return "", err
	}
	iso, err := volume.BuildSeedISO(b.cfg.BaseUserData, domain)
	if err != nil {
		return "", err
	}
	vol, err := volume.CreateRaw(pool, name, uint64(len(iso)))
	if err != nil {
		return "", err
	}
	defer vol.Free()
	undo.push("delete seed volume", func() error { return b.deleteVolumeIn(conn, name) })
	if err := conn.UploadVolume(vol, iso); err != nil {
		return "", fmt.Errorf("upload: %w", err)
	}
	return vol.GetPath()
}
