package hostconn

import (
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// Size is what a host last said about its size (virNodeGetInfo,
// virNodeGetFreeMemory, the storage pool's info). Zero fields: not read.
type Size struct {
	VCPUs         int
	MemoryMiB     int64
	FreeMemoryMiB int64
	PoolFreeBytes uint64
	PoolCapacity  uint64
	PoolAlloc     uint64
	PoolKnown     bool
	// HugePages are the readings of the huge page sizes of
	// Config.HugePageSizes (nil when none is configured or read).
	HugePages map[uint64]HugePages
}

// ReadSize reads the host's size on conn and hands it to Config.OnSize. It runs at
// connect and with every listing; a reading that fails keeps the last
// one (logged at debug: the listing's own errors say what is wrong).
func (h *Host) ReadSize(conn virt.Conn) {
	h.capMu.Lock()
	sz := h.size
	h.capMu.Unlock()
	if info, err := conn.GetNodeInfo(); err == nil {
		sz.VCPUs, sz.MemoryMiB = int(info.Cpus), int64(info.Memory/1024)
	} else {
		h.log.Debug("node info not read", "err", virt.Scrub(err, h.uri))
	}
	if free, err := conn.GetFreeMemory(); err == nil {
		sz.FreeMemoryMiB = int64(free >> 20)
	} else {
		h.log.Debug("free memory not read", "err", virt.Scrub(err, h.uri))
	}
	if pool, err := conn.LookupStoragePoolByName(h.cfg.Pool); err == nil {
		if info, err := pool.GetInfo(); err == nil {
			sz.PoolFreeBytes, sz.PoolCapacity, sz.PoolAlloc, sz.PoolKnown = info.Available, info.Capacity, info.Allocation, true
		}
		_ = pool.Free()
	}
	if len(h.cfg.HugePageSizes) > 0 {
		if hp, err := ReadHugePages(conn, h.cfg.HugePageSizes); err == nil {
			sz.HugePages = hp
		} else {
			h.log.Debug("huge pages not read", "err", virt.Scrub(err, h.uri))
		}
	}
	h.capMu.Lock()
	h.size = sz
	h.capMu.Unlock()
	if h.cfg.OnSize != nil {
		h.cfg.OnSize(sz)
	}
}

// Size is the host's size as last read (zero fields: not read yet).
func (h *Host) Size() Size {
	h.capMu.Lock()
	defer h.capMu.Unlock()
	return h.size
}

// Versions are the libvirt and hypervisor versions of the host, read on
// conn once per connection (see versionCache); "" when not read.
func (h *Host) Versions(conn virt.Conn) (lib, hyp string) {
	return h.versions.read(h.Link(), conn)
}

// versionCache keeps a host's libvirt and hypervisor versions for the
// connection they were read on: they change only with a new daemon, which
// means a new connection. The host view is read after every reconcile pass
// (the capacity gauges), and the QEMU driver answers virConnectGetVersion
// from its QEMU capabilities, which a daemon whose /dev/kvm QEMU cannot
// use probes anew on each call: asked every pass, the probes held every
// define behind them for minutes.
type versionCache struct {
	mu       sync.Mutex
	link     time.Time // Host.Link of the connection they were read on
	lib, hyp string
}

func (c *versionCache) read(link time.Time, conn virt.Conn) (lib, hyp string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !link.IsZero() && link.Equal(c.link) && c.lib != "" {
		return c.lib, c.hyp
	}
	c.lib, c.hyp = "", ""
	if v, err := conn.GetLibVersion(); err == nil {
		c.lib = virt.Version(v)
	}
	if v, err := conn.GetVersion(); err == nil {
		c.hyp = virt.Version(v)
	}
	c.link = link
	return c.lib, c.hyp
}
