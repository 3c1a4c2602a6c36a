package main

import (
	"context"
	"errors"

	"github.com/bigfleet/libvirt-provider/backend"
)

// openLibvirt connects to the hosts named by --connect. Placeholder until
// the libvirt backend lands: that change replaces this file.
func openLibvirt(ctx context.Context, cfg config) (backend.Backend, error) {
	_, _ = ctx, cfg
	return nil, errors.New("--connect: the libvirt backend is not available in this build yet (use --use-fake-backend for a test substrate)")
}
