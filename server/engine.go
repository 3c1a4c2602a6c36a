package server

import (
	"context"

	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Engine is what the handlers need from the lifecycle engine.
// *lifecycle.Engine satisfies it; tests substitute scripted fakes to reach
// error paths (panics, outages) the real engine cannot produce on demand.
type Engine interface {
	Create(ctx context.Context, req record.CreateRequest) (record.Ack, error)
	Configure(ctx context.Context, req record.ConfigureRequest) (record.Ack, error)
	Drain(ctx context.Context, req record.DrainRequest) (record.Ack, error)
	Delete(ctx context.Context, req record.DeleteRequest) (record.Ack, error)
	// The reads hand out published records without copying them: the
	// wire layer only reads them (see lifecycle.Engine.GetShared).
	GetShared(ctx context.Context, id string) (*record.Machine, error)
	ListShared(ctx context.Context, q record.ListQuery) (lifecycle.SharedList, error)
}
