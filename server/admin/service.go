package admin

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bigfleet/libvirt-provider/backend"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1/adminv1connect"
	"github.com/bigfleet/libvirt-provider/server/callerid"
	"github.com/bigfleet/libvirt-provider/server/convert"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/fence"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/index"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// ServiceName is the fully-qualified name, for reflection.
const ServiceName = adminv1connect.AdminServiceName

// Engine is what the admin API needs from the lifecycle engine;
// *lifecycle.Engine satisfies it.
type Engine interface {
	Get(ctx context.Context, id string) (record.Machine, error)
	List(ctx context.Context, q record.ListQuery) (record.ListResult, error)
	Counts() map[index.StateZone]int
	Marks() map[record.MarkKey]record.Mark
	ShardLimit() (limit int, refused int64)
	BusiestMachines(n int, keep func(machineID string) bool) []fence.ShardCount
	LastReconcile() lifecycle.ReconcileReport
	Reconcile(ctx context.Context) lifecycle.ReconcileReport
	Release(ctx context.Context, id string) (record.Ack, error)
	Migrate(ctx context.Context, id, toHost string) (lifecycle.MigrateResult, error)
	ClearMark(ctx context.Context, id, shard, by string) (lifecycle.ClearedMark, error)
	Watch(buffer int) (ch <-chan record.Machine, lost func() bool, cancel func())
	Backend() backend.Backend
}

var _ Engine = (*lifecycle.Engine)(nil)

// Options configures the admin service. Engine is required.
type Options struct {
	Engine Engine
	// AllowWrite is --admin-write: without it the writes (ReleaseMachine,
	// TriggerReconcile, CordonHost, UncordonHost, DeclareHostDown,
	// DeclareHostUp, MigrateMachine) answer PermissionDenied to everyone.
	AllowWrite bool
	// Clients is --admin-clients: with AllowWrite, only callers whose
	// verified client certificate matches may write. Empty: nobody.
	// Deliberately no option names a caller: the only identity is the
	// certificate the TLS stack verified (withCaller), so no setting can
	// open writes to a caller without one. Tests that cannot present a
	// certificate get one from admintest, in front of the handler.
	Clients Clients
	Logger  *slog.Logger // nil: discard
	// Registerer receives admin_writes_total{action,result,identity}; nil
	// registers nowhere.
	Registerer prometheus.Registerer
	// Heartbeat is the idle interval after which WatchMachines sends a
	// HEARTBEAT event; 0 means 15s.
	Heartbeat time.Duration
	// CordonFile keeps the cordons made through the admin API across
	// restarts (a small JSON file, replaced atomically; CordonFileFor names
	// it after --state); empty keeps them in memory only. New re-applies
	// them to the backend.
	CordonFile string
	// DownFile keeps the hosts declared down through the admin API across
	// restarts, like CordonFile (DownFileFor names it after --state).
	DownFile string
	// OnCordon is called after each cordon, uncordon or down declaration
	// change that took effect (the host gauges refresh their cached
	// snapshot); nil: nothing. It must not block: it runs in the RPC.
	OnCordon func()
	// UI serves the web page at / and /ui/; nil serves no page.
	UI  http.Handler
	Now func() time.Time // nil: time.Now
	// CallerMode is --addr's caller identity mode (bigfleet, any or off),
	// and Refusals lists its latest refusals (nil: none).
	CallerMode string
	Refusals   func() []callerid.Rejection
	// Guard, when set (--caller-identity=bigfleet), holds every read to
	// the caller's certificate: bigfleet://admin or bigfleet://readonly,
	// refused like CapacityProvider calls (the same log line, metric and
	// refusal list). nil: reads are open to whoever reaches the listener.
	// Writes keep their own gate (AllowWrite, Clients) either way.
	Guard *callerid.Guard
}

// CordonFileFor is the cordon file of a provider whose state file is
// statePath: beside it, "<state>.cordons.json". Without a state file ("")
// there is none and cordons last until the process exits, like the state.
func CordonFileFor(statePath string) string {
	if statePath == "" {
		return ""
	}
	return statePath + ".cordons.json"
}

// DownFileFor is the down file of a provider whose state file is
// statePath: "<state>.down.json", or none without a state file.
func DownFileFor(statePath string) string {
	if statePath == "" {
		return ""
	}
	return statePath + ".down.json"
}

// Service implements adminv1connect.AdminServiceHandler.
type Service struct {
	eng       Engine
	write     bool
	clients   Clients
	log       *slog.Logger
	writes    *prometheus.CounterVec
	heartbeat time.Duration
	ui        http.Handler
	cordons   *hostStore
	downs     *hostStore
	onCordon  func()
	now       func() time.Time

	callerMode string
	refusals   func() []callerid.Rejection
	guard      *callerid.Guard
	stop       chan struct{}
	stopOnce   sync.Once
}

var _ adminv1connect.AdminServiceHandler = (*Service)(nil)

// New builds the service and re-applies the persisted cordons and down
// declarations; it panics without an engine (a wiring bug) and returns an
// error, naming the file, if the cordon or down file cannot be read, or
// if the metric cannot be registered.
func New(opts Options) (*Service, error) {
	if opts.Engine == nil {
		panic("admin.New: Options.Engine is nil")
	}
	cordons, err := loadHostFile(opts.CordonFile, cordonFile)
	if err != nil {
		return nil, fmt.Errorf("admin cordons %s: %w", opts.CordonFile, err)
	}
	downs, err := loadHostFile(opts.DownFile, downFile)
	if err != nil {
		return nil, fmt.Errorf("admin down declarations %s: %w", opts.DownFile, err)
	}
	s := &Service{eng: opts.Engine, write: opts.AllowWrite, clients: opts.Clients, log: opts.Logger,
		heartbeat: opts.Heartbeat, ui: opts.UI, cordons: cordons, downs: downs, onCordon: opts.OnCordon, now: opts.Now, stop: make(chan struct{}),
		callerMode: opts.CallerMode, refusals: opts.Refusals, guard: opts.Guard}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.heartbeat <= 0 {
		s.heartbeat = 15 * time.Second
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.onCordon == nil {
		s.onCordon = func() {}
	}
	s.writes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "admin_writes_total",
		Help: "Admin API write attempts by action, result (ok, denied, error) and caller identity (the --admin-clients pattern that matched, or anonymous, or unlisted).",
	}, []string{"action", "result", "identity"})
	// Export zeros, so rate() works from the start.
	for _, a := range []string{actionRelease, actionReconcile, actionCordon, actionUncordon, actionDown, actionUp, actionFenceClear} {
		for _, id := range []string{labelAnonymous, labelUnlisted} {
			s.writes.WithLabelValues(a, "denied", id)
		}
		for _, p := range s.clients.Patterns() {
			for _, r := range []string{"ok", "denied", "error"} {
				s.writes.WithLabelValues(a, r, p)
			}
		}
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(s.writes); err != nil {
			return nil, err
		}
	}
	// The host gauges were read before these were applied.
	if s.applyCordons()+s.applyDowns() > 0 {
		s.onCordon()
	}
	return s, nil
}

// Close ends every WatchMachines stream (normally, so clients reconnect
// elsewhere) and makes new ones end at once. Call it when shutdown begins:
// an open admin page must not hold the graceful drain until its bound.
func (s *Service) Close() { s.stopOnce.Do(func() { close(s.stop) }) }

// Mount adds the admin API and the web page to mux; its signature matches
// server.Options.Mount. The page is served at exactly "/" and its assets
// under "/ui/", so unknown RPC paths still get 404, never HTML.
func (s *Service) Mount(mux *http.ServeMux, interceptors connect.HandlerOption) {
	opts := []connect.HandlerOption{interceptors, connect.WithReadMaxBytes(1 << 20)}
	if s.guard != nil {
		// Innermost, as on CapacityProvider: after the request id, before
		// the method.
		opts = append(opts, connect.WithInterceptors(s.guard.AdminInterceptor(IsWrite, s.listed)))
	}
	path, h := adminv1connect.NewAdminServiceHandler(s, opts...)
	if s.guard != nil {
		h = s.guard.Middleware(h)
	}
	mux.Handle(path, withCaller(h))
	if s.ui != nil {
		mux.Handle("GET /{$}", s.ui)
		mux.Handle("GET /ui/", s.ui)
	}
}

func (s *Service) GetFleetSummary(_ context.Context, _ *connect.Request[adminv1.GetFleetSummaryRequest]) (*connect.Response[adminv1.GetFleetSummaryResponse], error) {
	out := &adminv1.GetFleetSummaryResponse{
		AdminWrite:    s.write,
		LastReconcile: reconcileToProto(s.eng.LastReconcile()),
		ServerTime:    ts(s.now()),
	}
	for k, n := range s.eng.Counts() {
		if n == 0 {
			continue
		}
		out.Counts = append(out.Counts, &adminv1.StateZoneCount{
			State: stateToProto(k.State), Zone: k.Zone, Count: int32(n)})
		out.Total += int32(n)
	}
	slices.SortFunc(out.Counts, func(a, b *adminv1.StateZoneCount) int {
		return cmp.Or(cmp.Compare(a.Zone, b.Zone), cmp.Compare(a.State, b.State))
	})
	return connect.NewResponse(out), nil
}

func (s *Service) ListMachines(ctx context.Context, req *connect.Request[adminv1.ListMachinesRequest]) (*connect.Response[adminv1.ListMachinesResponse], error) {
	if req.Msg.GetMaxResults() < 0 {
		return nil, convert.WireError(&record.Error{Code: record.CodeInvalid, Msg: "max_results must not be negative"})
	}
	all, err := s.all(ctx)
	if err != nil {
		return nil, convert.WireError(err)
	}
	states, zones, hosts := req.Msg.GetStates(), req.Msg.GetZones(), req.Msg.GetHosts()
	ms := slices.DeleteFunc(all, func(m record.Machine) bool {
		return (len(states) > 0 && !slices.Contains(states, stateToProto(m.State))) ||
			(len(zones) > 0 && !slices.Contains(zones, m.Zone)) ||
			(len(hosts) > 0 && !slices.Contains(hosts, machineHost(m)))
	})
	out := &adminv1.ListMachinesResponse{TotalMatched: int32(len(ms))}
	if n := int(req.Msg.GetMaxResults()); n > 0 && len(ms) > n {
		ms = ms[:n]
	}
	now := s.now()
	out.Machines = make([]*adminv1.AdminMachine, len(ms))
	for i, m := range ms {
		out.Machines[i] = s.machineView(m, now)
	}
	return connect.NewResponse(out), nil
}

func (s *Service) GetMachine(ctx context.Context, req *connect.Request[adminv1.GetMachineRequest]) (*connect.Response[adminv1.GetMachineResponse], error) {
	m, err := s.eng.Get(ctx, req.Msg.GetId())
	if err != nil {
		return nil, convert.WireError(err)
	}
	return connect.NewResponse(&adminv1.GetMachineResponse{Machine: s.machineView(m, s.now())}), nil
}

func (s *Service) GetMachineHistory(ctx context.Context, req *connect.Request[adminv1.GetMachineHistoryRequest]) (*connect.Response[adminv1.GetMachineHistoryResponse], error) {
	m, err := s.eng.Get(ctx, req.Msg.GetId())
	if err != nil {
		return nil, convert.WireError(err)
	}
	out := &adminv1.GetMachineHistoryResponse{MachineId: m.ID, Limit: record.HistoryLimit}
	now := s.now()
	for _, t := range m.History {
		out.Transitions = append(out.Transitions, transitionToProto(t, now))
	}
	return connect.NewResponse(out), nil
}

func (s *Service) ListFenceMarks(_ context.Context, req *connect.Request[adminv1.ListFenceMarksRequest]) (*connect.Response[adminv1.ListFenceMarksResponse], error) {
	shard, machine := req.Msg.GetShardId(), req.Msg.GetMachineId()
	byShard := map[string]*adminv1.ShardMarks{}
	machines := map[string]bool{} // with a mark that passed the filters
	for k, m := range s.eng.Marks() {
		if (shard != "" && k.ShardID != shard) || (machine != "" && k.MachineID != machine) {
			continue
		}
		machines[k.MachineID] = true
		sm := byShard[k.ShardID]
		if sm == nil {
			sm = &adminv1.ShardMarks{ShardId: k.ShardID}
			byShard[k.ShardID] = sm
		}
		sm.Marks = append(sm.Marks, &adminv1.FenceMark{MachineId: k.MachineID, Epoch: m.Epoch, Sequence: m.Sequence})
	}
	out := &adminv1.ListFenceMarksResponse{}
	for _, sm := range byShard {
		slices.SortFunc(sm.Marks, func(a, b *adminv1.FenceMark) int { return cmp.Compare(a.MachineId, b.MachineId) })
		out.Shards = append(out.Shards, sm)
	}
	slices.SortFunc(out.Shards, func(a, b *adminv1.ShardMarks) int { return cmp.Compare(a.ShardId, b.ShardId) })
	limit, refused := s.eng.ShardLimit()
	out.ShardsPerMachineLimit, out.RefusedAtLimit = int32(limit), refused
	for _, c := range s.eng.BusiestMachines(busiestListed, func(id string) bool { return machines[id] }) {
		out.Busiest = append(out.Busiest, &adminv1.MachineShardCount{MachineId: c.MachineID, Shards: int32(c.Shards)})
	}
	return connect.NewResponse(out), nil
}

// busiestListed is how many machines ListFenceMarks ranks by shard count.
const busiestListed = 20

// ListIdentityRefusals lists the latest CapacityProvider calls the caller
// identity check refused (none when the check is off).
func (s *Service) ListIdentityRefusals(_ context.Context, _ *connect.Request[adminv1.ListIdentityRefusalsRequest]) (*connect.Response[adminv1.ListIdentityRefusalsResponse], error) {
	out := &adminv1.ListIdentityRefusalsResponse{Mode: s.callerMode}
	if s.refusals != nil {
		for _, r := range s.refusals() {
			out.Refusals = append(out.Refusals, &adminv1.IdentityRefusal{Time: ts(r.At), Method: r.Method,
				Reason: string(r.Reason), Presented: r.Presented, Needed: r.Needed, Peer: r.Peer, Protocol: r.Protocol})
		}
	}
	return connect.NewResponse(out), nil
}
