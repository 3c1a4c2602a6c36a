package guestagent

import (
	"context"
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/internal/backoff"
)

const (
	// DefaultChunkSize is the raw bytes per guest-file-write: 64 KiB once
	// base64-encoded, far below the message limits of libvirt (a few MiB per
	// agent reply/command) and qemu-ga's JSON parser.
	DefaultChunkSize = 48 << 10
	// MaxChunkSize caps a caller's chunk size for the same reason.
	MaxChunkSize = 1 << 20
)

// WaitReady pings the agent with backoff (100 ms doubling to 2 s) until it
// answers or ctx ends. A guest that answers with an agent error is up too.
func (c *Client) WaitReady(ctx context.Context) error {
	start := c.clock.Now()
	delay := backoff.New(100*time.Millisecond, 2*time.Second)
	var last error
	for {
		err := c.Ping(ctx)
		if err == nil || IsAgentError(err) {
			return nil
		}
		last = err
		if ctx.Err() != nil || c.clock.Sleep(ctx, delay.Next()) != nil {
			break
		}
	}
	waited := c.clock.Now().Sub(start)
	if dl, ok := ctx.Deadline(); ok {
		waited = dl.Sub(start) // the budget we were given, not jitter around it
	}
	if waited >= time.Second {
		waited = waited.Round(time.Second)
	}
	return &unavailableError{
		msg: fmt.Sprintf("guest agent did not answer within %s: the guest may not have booted "+
			"(a KVM guest under nested virtualisation without vmx never does; see --domain-type), "+
			"or qemu-guest-agent is not running on the %s channel; last error: %v",
			waited, ChannelName, last),
		cause: last,
	}
}

// ChannelName is the virtio-serial channel qemu-ga listens on.
const ChannelName = "org.qemu.guest_agent.0"

// WriteFile writes data to path in the guest through guest-file-open "w",
// guest-file-write in chunks and guest-file-close. The data never passes
// through argv, the environment or a shell. The handle is closed on every
// path, also when a write fails or ctx ends, so qemu-ga does not leak it.
//
// qemu-ga creates a new file 0666 whatever its umask (an existing file is
// truncated and keeps its mode), so a secret must go to a file created with
// the right mode beforehand: Configure has tidy create it 0600 in a 0700
// directory (guestside.go). Nothing here chmods.
func (c *Client) WriteFile(ctx context.Context, path string, data []byte, chunkSize int) (err error) {
	if chunkSize <= 0 {
		chunkSize = DefaultChunkSize
	}
	chunkSize = min(chunkSize, MaxChunkSize)
	h, err := c.FileOpen(ctx, path, "w")
	if err != nil {
		return err
	}
	defer func() {
		// WithoutCancel: the close must go out even when ctx is why we stop;
		// the per-command timeout still bounds it.
		if cerr := c.FileClose(context.WithoutCancel(ctx), h); cerr != nil && err == nil {
			err = cerr
		}
	}()
	for off := 0; off < len(data); off += chunkSize {
		end := min(off+chunkSize, len(data))
		if _, err := c.FileWrite(ctx, h, data[off:end]); err != nil {
			return fmt.Errorf("%w (at byte %d of %d)", err, off, len(data))
		}
	}
	return nil
}
