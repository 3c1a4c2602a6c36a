package resume

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/internal/backoff"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// script is both the Engine and the Prober: the guest's answers in order
// (the last repeats) and a record of every call.
type script struct {
	mu        sync.Mutex
	answers   []backend.HookTrace
	probeErr  error
	gateErr   error
	calls     []string
	abandonIn []time.Duration
}

func (s *script) note(c string) { s.mu.Lock(); s.calls = append(s.calls, c); s.mu.Unlock() }

func (s *script) EnterCall(ctx context.Context, id string, _ record.OpKind) (func(), record.OpKind, error) {
	if s.gateErr != nil {
		return nil, record.OpDrain, s.gateErr
	}
	s.note("enter")
	return func() { s.note("leave") }, "", nil
}

func (s *script) Marks(string) map[string]backend.FenceMark {
	return map[string]backend.FenceMark{"s": {Epoch: 2, Sequence: 3}}
}

func (s *script) Addresses(context.Context, string, backend.Placement) []string {
	return []string{"198.51.100.7"}
}

func (s *script) Abandon(_ record.Machine, within time.Duration) error {
	s.mu.Lock()
	s.abandonIn = append(s.abandonIn, within)
	s.mu.Unlock()
	s.note("abandon")
	return nil
}

func (s *script) ProbeConfigure(_ context.Context, spec backend.ConfigureSpec) (backend.ConfigureTrace, error) {
	s.note("probe " + spec.OperationID)
	if s.probeErr != nil {
		return backend.ConfigureTrace{}, s.probeErr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.answers[0]
	if len(s.answers) > 1 {
		s.answers = s.answers[1:]
	}
	return backend.ConfigureTrace{Hook: h, ExitCode: 3}, nil
}

func (s *script) FinishConfigure(_ context.Context, spec backend.ConfigureSpec) error {
	if spec.BootstrapBlob != nil || spec.ClusterID != "c" || spec.Marks["s"].Sequence != 3 {
		return errors.New("bad spec")
	}
	s.note("finish")
	return nil
}

func (s *script) RollBackConfigure(_ context.Context, spec backend.ConfigureSpec) error {
	s.note("rollback " + spec.OperationID)
	return nil
}

func (s *script) run(timeout time.Duration) Outcome {
	cfg := Config{Prober: s, Timeout: timeout, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Retry: func() *backoff.Backoff { return backoff.New(time.Millisecond, 5*time.Millisecond) }}
	m := record.Machine{ID: "m", OperationID: "op-1", State: record.Configuring, Cluster: "c", Zone: "z", Domain: "d"}
	return Configure(context.Background(), s, cfg, m)
}

func (s *script) trail() string { s.mu.Lock(); defer s.mu.Unlock(); return strings.Join(s.calls, ", ") }

// Each answer of the guest ends the cut Configure as the package says,
// with the calls in their order: the gate held throughout, the guest
// cleaned before any end that is not CONFIGURED, a rollback confirmed by
// a second question and then its intent cleared.
func TestConfigureEnds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		answers []backend.HookTrace
		want    func(Outcome) bool
		trail   string
	}{
		{"never started", []backend.HookTrace{backend.HookNeverStarted},
			func(o Outcome) bool {
				return strings.HasPrefix(o.Rollback, "configure rolled back to IDLE") && o.Err == nil
			},
			"enter, probe op-1, abandon, probe op-1, rollback op-1, leave"},
		{"finished ok", []backend.HookTrace{backend.HookSucceeded},
			func(o Outcome) bool { return o.Err == nil && o.Rollback == "" && len(o.Addresses) == 1 },
			"enter, probe op-1, finish, leave"},
		{"failed", []backend.HookTrace{backend.HookFailed},
			func(o Outcome) bool {
				return o.Err != nil && strings.Contains(o.Err.Error(), "exited with status 3") && !o.TimedOut
			},
			"enter, probe op-1, abandon, leave"},
		{"started during the rollback", []backend.HookTrace{backend.HookNeverStarted, backend.HookRunning},
			func(o Outcome) bool {
				return o.Err != nil && strings.Contains(o.Err.Error(), "started while the Configure was being rolled back")
			},
			"enter, probe op-1, abandon, probe op-1, leave"},
		{"running, then finished", []backend.HookTrace{backend.HookRunning, backend.HookSucceeded},
			func(o Outcome) bool { return o.Err == nil && o.Rollback == "" },
			"enter, probe op-1, probe op-1, finish, leave"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &script{answers: tc.answers}
			o := s.run(time.Minute)
			if !tc.want(o) || s.trail() != tc.trail {
				t.Fatalf("outcome %+v, calls %q; want calls %q", o, s.trail(), tc.trail)
			}
		})
	}
}

// A guest that never answers ends the resume at its bound, timed out,
// cleaned within the shorter late bound; a gate that does not open in
// time ends it timed out without a call.
func TestConfigureBounds(t *testing.T) {
	t.Parallel()
	s := &script{probeErr: errors.New("agent not responding")}
	o := s.run(50 * time.Millisecond)
	if !o.TimedOut || !strings.Contains(o.Err.Error(), "could not tell within --configure-timeout (50ms)") ||
		!strings.Contains(o.Err.Error(), "agent not responding") || len(s.abandonIn) != 1 || s.abandonIn[0] != LateAbandonTimeout {
		t.Fatalf("outcome %+v, cleanups within %v", o, s.abandonIn)
	}
	g := &script{gateErr: context.DeadlineExceeded}
	if o := g.run(time.Second); !o.TimedOut || !strings.Contains(o.Err.Error(), "earlier drain call did not return") || g.trail() != "" {
		t.Fatalf("gate shut: outcome %+v, calls %q", o, g.trail())
	}
}
