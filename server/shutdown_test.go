package server

import (
	"context"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
)

// TestGracefulShutdown: an RPC in flight when shutdown starts completes
// normally; Shutdown waits for it.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	ts := startServer(t, modeH2C)
	ts.engine.block = make(chan struct{})
	ts.engine.entered = make(chan struct{})
	c := grpcClient{dialGRPC(t, ts, nil)}
	res := make(chan error, 1)
	go func() {
		_, err := c.call(t.Context(), bigfleetv1alpha1connect.CapacityProviderGetProcedure, &pb.MachineRef{Id: "slow"}, &pb.Machine{})
		res <- err
	}()
	<-ts.engine.entered

	ts.status.BeginShutdown()
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- ts.lis.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while an RPC was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(ts.engine.block)
	if err := <-res; err != nil {
		t.Errorf("in-flight RPC failed during shutdown: %v", err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
