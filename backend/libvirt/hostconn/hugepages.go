package hostconn

import (
	"fmt"
	"slices"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// HugePages is what a host offers of one huge page size: the pages
// reserved (capabilities, summed over NUMA cells) and, when read, free.
type HugePages struct {
	Supported bool   // the CPU has pages of this size
	TotalKiB  uint64 // reserved (vm.nr_hugepages and the like)
	FreeKiB   uint64 // not in use; read by ReadHugePages only
	FreeKnown bool
}

// HugePageSizes reads the host's capabilities and returns, for each size
// asked (KiB), whether the CPU offers it and how much is reserved.
func HugePageSizes(conn virt.Conn, sizesKiB []uint64) (map[uint64]HugePages, error) {
	caps, err := readCaps(conn)
	if err != nil {
		return nil, err
	}
	return hugePagesOf(caps, sizesKiB), nil
}

func hugePagesOf(caps *libvirtxml.Caps, sizesKiB []uint64) map[uint64]HugePages {
	out := make(map[uint64]HugePages, len(sizesKiB))
	for _, sz := range sizesKiB {
		var hp HugePages
		if caps.Host.CPU != nil {
			hp.Supported = slices.ContainsFunc(caps.Host.CPU.PageSizes, func(p libvirtxml.CapsHostCPUPageSize) bool {
				return kib(uint64(max(p.Size, 0)), p.Unit) == sz
			})
		}
		for _, c := range cells(caps) {
			for _, p := range c.PageInfo {
				if kib(uint64(max(p.Size, 0)), p.Unit) == sz {
					hp.TotalKiB += p.Count * sz
				}
			}
		}
		out[sz] = hp
	}
	return out
}

func cells(caps *libvirtxml.Caps) []libvirtxml.CapsHostNUMACell {
	if caps.Host.NUMA == nil || caps.Host.NUMA.Cells == nil {
		return nil
	}
	return caps.Host.NUMA.Cells.Cells
}

// kib converts a page size in unit to KiB (0 for a unit libvirt never uses).
func kib(v uint64, unit string) uint64 {
	switch unit {
	case "", "KiB", "K", "k":
		return v
	case "MiB", "M":
		return v << 10
	case "GiB", "G":
		return v << 20
	}
	return 0
}

// ReadHugePages is HugePageSizes plus the free pages of each size
// (virNodeGetFreePages over every NUMA cell).
func ReadHugePages(conn virt.Conn, sizesKiB []uint64) (map[uint64]HugePages, error) {
	caps, err := readCaps(conn)
	if err != nil {
		return nil, err
	}
	out := hugePagesOf(caps, sizesKiB)
	n := len(cells(caps))
	if n == 0 || len(sizesKiB) == 0 {
		return out, nil
	}
	free, err := conn.GetFreePages(sizesKiB, cells(caps)[0].ID, uint(n), 0)
	if err != nil {
		return out, fmt.Errorf("free huge pages: %w", err)
	}
	// The reply is cell by cell, each with one count per size asked.
	for i, cnt := range free {
		sz := sizesKiB[i%len(sizesKiB)]
		hp := out[sz]
		hp.FreeKiB += cnt * sz
		hp.FreeKnown = true
		out[sz] = hp
	}
	return out, nil
}
