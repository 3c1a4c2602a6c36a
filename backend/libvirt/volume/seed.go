package volume

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

func CreateRaw(pool virt.Pool, name string, size uint64) (virt.Volume, error) {
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

// BuildSeedISO runs the ISO tool found at startup in a temporary directory.
func BuildSeedISO(userData, domain string) ([]byte, error) {
	tool := ISOTool()
	if tool == "" {
		return nil, fmt.Errorf("no ISO tool (%s) on PATH", strings.Join(ISOTools, ", "))
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

var ISOTools = []string{"genisoimage", "xorriso", "mkisofs"}

// ISOTool returns the first ISO builder found on PATH, or "".
func ISOTool() string {
	for _, t := range ISOTools {
		if p, err := exec.LookPath(t); err == nil {
			return p
		}
	}
	return ""
}
