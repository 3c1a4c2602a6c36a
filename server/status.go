package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"connectrpc.com/grpchealth"

	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
	"github.com/bigfleet/libvirt-provider/server/convert"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Status is the one answer to "should traffic come here?", shared by
// grpc.health.v1 and /readyz so the two can never disagree. It is ready
// while serving has been allowed, shutdown has not begun and every probe
// (e.g. "the store is open") passes.
type Status struct {
	serving      atomic.Bool
	shuttingDown atomic.Bool

	mu     sync.Mutex
	probes []func() error
}

// NewStatus returns a Status that is serving.
func NewStatus() *Status {
	s := &Status{}
	s.serving.Store(true)
	return s
}

// SetServing flips the operator-settable part of the status (e.g. while
// starting up or for a manual drain). It cannot undo BeginShutdown.
func (s *Status) SetServing(ok bool) { s.serving.Store(ok) }

// BeginShutdown makes the status NOT_SERVING for good. Call it first on
// SIGTERM, before draining, so load balancers stop sending new work.
func (s *Status) BeginShutdown() { s.shuttingDown.Store(true) }

// AddProbe registers a readiness condition; a non-nil error means not ready.
func (s *Status) AddProbe(p func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probes = append(s.probes, p)
}

// Ready returns nil when traffic is welcome, otherwise why not.
func (s *Status) Ready() error {
	if s.shuttingDown.Load() {
		return errors.New("shutting down")
	}
	if !s.serving.Load() {
		return errors.New("not serving")
	}
	s.mu.Lock()
	probes := s.probes
	s.mu.Unlock()
	for _, p := range probes {
		if err := p(); err != nil {
			return err
		}
	}
	return nil
}

// healthChecker answers grpc.health.v1 from a Status. The empty service
// name means the whole server.
type healthChecker struct{ status *Status }

var healthServices = map[string]bool{
	"": true,
	bigfleetv1alpha1connect.CapacityProviderName: true,
}

func (h healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if !healthServices[req.Service] {
		return nil, convert.WireError(&record.Error{Code: record.CodeNotFound, Msg: "unknown service " + req.Service})
	}
	if h.status.Ready() != nil {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}
