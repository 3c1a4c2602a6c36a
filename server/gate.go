package server

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Gate lets calls through only while this process acts as the leader
// (--leader-elect). A standby, and a leader that lost its lease, answer
// every RPC (CapacityProvider, admin, reflection) with Unavailable naming
// the leader, and are not ready; grpc.health.v1 still answers (it is how a
// client learns "not serving"). A nil *Gate lets everything through.
type Gate struct {
	state  atomic.Int32 // gateClosed, gateOpen or gateStopped
	leader atomic.Pointer[string]
	self   string
}

const (
	gateClosed int32 = iota
	gateOpen
	gateStopped // for good: a leader that lost its lease never acts again
)

// NewGate returns a closed gate for the candidate named self.
func NewGate(self string) *Gate { return &Gate{self: self} }

// Open starts letting calls through, once the engine acts; it reports
// false (and stays shut) after Stop.
func (g *Gate) Open() bool { return g.state.CompareAndSwap(gateClosed, gateOpen) }

// Stop refuses every call from now on, for good; in-flight calls are the
// caller's to cancel.
func (g *Gate) Stop() { g.state.Store(gateStopped) }

// Stopped reports whether Stop was called.
func (g *Gate) Stopped() bool { return g.state.Load() == gateStopped }

// Acting reports whether calls go through.
func (g *Gate) Acting() bool { return g == nil || g.state.Load() == gateOpen }

// SetLeader records who leads now, for the refusal's message.
func (g *Gate) SetLeader(id string) { g.leader.Store(&id) }

// Leader is the last leader seen ("" before any).
func (g *Gate) Leader() string {
	if p := g.leader.Load(); p != nil {
		return *p
	}
	return ""
}

// Ready is a Status probe: only the acting leader is ready, so a Service
// routes to it alone.
func (g *Gate) Ready() error {
	if g.Acting() {
		return nil
	}
	return errors.New(g.refusal())
}

// Refuse is nil while acting, else the Unavailable error a call gets.
func (g *Gate) Refuse() error {
	if g.Acting() {
		return nil
	}
	return &record.Error{Code: record.CodeUnavailable, Msg: g.refusal()}
}

func (g *Gate) refusal() string {
	leader := g.Leader()
	switch {
	case leader == "":
		return "standby " + g.self + ": no leader elected yet; retry"
	case g.Stopped():
		return g.self + " lost its lease and is stopping; retry: another replica takes over"
	case leader == g.self:
		return "leader " + g.self + " is starting; retry"
	}
	return "standby " + g.self + ": not the leader; the leader is " + leader
}

// gateExempt are the calls a standby still answers.
func gateExempt(procedure string) bool {
	return strings.HasPrefix(procedure, "/"+grpchealth.HealthV1ServiceName+"/")
}

// gateInterceptor refuses calls while the gate is closed. It runs inside
// the observer (so refusals are logged and counted with their request id)
// and before any handler, so a refused call changes nothing.
type gateInterceptor struct{ g *Gate }

func (i gateInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !gateExempt(req.Spec().Procedure) {
			if err := i.g.Refuse(); err != nil {
				return nil, err
			}
		}
		return next(ctx, req)
	}
}

func (i gateInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i gateInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if !gateExempt(conn.Spec().Procedure) {
			if err := i.g.Refuse(); err != nil {
				return err
			}
		}
		return next(ctx, conn)
	}
}
