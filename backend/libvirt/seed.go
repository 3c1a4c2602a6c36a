package libvirt

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
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
	iso, err := buildSeedISO(b.cfg.BaseUserData, domain)
	if err != nil {
		return "", err
	}
	vol, err := createRawVolume(pool, name, uint64(len(iso)))
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

func createRawVolume(pool hostconn.Pool, name string, size uint64) (hostconn.Volume, error) {
	s, err := (&libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: size},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "raw"}},
	}).Marshal()
	if err != nil {
		return nil, err
	}
	return pool.StorageVolCreateXML(s, 0)
}

// buildSeedISO runs the ISO tool found at startup in a temporary directory.
func buildSeedISO(userData, domain string) ([]byte, error) {
	tool := isoTool()
	if tool == "" {
		return nil, fmt.Errorf("no ISO tool (%s) on PATH", strings.Join(isoTools, ", "))
	}
	ud, err := os.ReadFile(userData)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bigfleet-seed-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	meta := "instance-id: " + domain + "\nlocal-hostname: " + domain + "\n"
	if err := os.WriteFile(filepath.Join(dir, "user-data"), ud, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "meta-data"), []byte(meta), 0o600); err != nil {
		return nil, err
	}
	args := []string{"-output", "seed.iso", "-volid", "cidata", "-joliet", "-rock", "user-data", "meta-data"}
	if filepath.Base(tool) == "xorriso" {
		args = append([]string{"-as", "mkisofs"}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: %w: %s", filepath.Base(tool), err, strings.TrimSpace(string(out)))
	}
	return os.ReadFile(filepath.Join(dir, "seed.iso"))
}
