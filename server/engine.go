package server

import (
	"context"

	"github.com/bigfleet/libvirt-provider/server/lifecycle"
)

// Engine is what the handlers need from the lifecycle engine.
// *lifecycle.Engine satisfies it; tests substitute scripted fakes to reach
// error paths (panics, outages) the real engine cannot produce on demand.
type Engine interface {
	Create(ctx context.Context, req lifecycle.CreateRequest) (lifecycle.Ack, error)
	Configure(ctx context.Context, req lifecycle.ConfigureRequest) (lifecycle.Ack, error)
	Drain(ctx context.Context, req lifecycle.DrainRequest) (lifecycle.Ack, error)
	Delete(ctx context.Context, req lifecycle.DeleteRequest) (lifecycle.Ack, error)
	// The reads hand out published records without copying them: the
	// wire layer only reads them (see lifecycle.Engine.GetShared).
	GetShared(ctx context.Context, id string) (*lifecycle.Machine, error)
	ListShared(ctx context.Context, q lifecycle.ListQuery) (lifecycle.SharedList, error)
}
