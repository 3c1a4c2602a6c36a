package server

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// HostCache holds the last snapshot of the hosts for the host gauges, so a
// scrape never calls libvirt: reading the hosts costs round trips to each
// of them, and a dead one would hold /metrics up to the bound. Refresh
// reads them anew in the background, one read at a time; a Refresh during
// a read asks for one more read after it, so a change made meanwhile (a
// cordon) is not lost to the read already under way.
type HostCache struct {
	hosts   HostsFunc
	timeout time.Duration
	ctx     context.Context // ended by Close: cuts a read under way
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	snap    []backend.HostStatus
	read    bool // a read has finished: snap is the hosts (nil before)
	running bool // a read is under way
	again   bool // a Refresh came during it
	closed  bool
}

// NewHostCache reads hosts, each read bounded by timeout, when Refresh is
// called; it holds no snapshot until the first read has finished.
func NewHostCache(hosts HostsFunc, timeout time.Duration) *HostCache {
	ctx, cancel := context.WithCancel(context.Background())
	return &HostCache{hosts: hosts, timeout: timeout, ctx: ctx, cancel: cancel}
}

// Refresh starts a read of the hosts and returns at once; during a read
// it only asks for another one after it. It never blocks, so a reconcile
// pass or an RPC may call it.
func (c *HostCache) Refresh() {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
	case c.running:
		c.again = true
	default:
		c.running = true
		c.wg.Add(1)
		go c.readLoop()
	}
}

// readLoop reads until no Refresh came during the last read.
func (c *HostCache) readLoop() {
	defer c.wg.Done()
	for {
		ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
		hs := c.hosts(ctx)
		cancel()
		c.mu.Lock()
		c.snap, c.read = hs, true
		if !c.again || c.closed {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.again = false
		c.mu.Unlock()
	}
}

// Snapshot is the hosts as last read, and whether a read has finished.
func (c *HostCache) Snapshot() ([]backend.HostStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.snap), c.read
}

// Close cuts a read under way, waits for it and makes Refresh a no-op:
// call it before the backend it reads is closed.
func (c *HostCache) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}
