package admin_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
)

// downFile is a down file path in a fresh directory (nothing there yet).
func downFile(t *testing.T) string {
	return admin.DownFileFor(filepath.Join(t.TempDir(), "state.db"))
}

// readFile is the file's content, "" when there is none.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// TestDeclareHostDownRefused: without --admin-write, or for a caller not
// on --admin-clients, both writes answer PermissionDenied on every
// protocol, reach no backend, write no file, and are logged and counted.
func TestDeclareHostDownRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts admintest.Options
	}{
		{"read-only", admintest.Options{}},
		{"unlisted", admintest.Options{AdminWrite: true, Clients: "uri:bigfleet://admin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.opts.DownFile = downFile(t)
			s, pool := startPool(t, tc.opts)
			for _, p := range protocols {
				c := adminClient(s, p.opts)
				_, err := c.DeclareHostDown(t.Context(), connect.NewRequest(&adminv1.DeclareHostDownRequest{Host: "kvm-a2", Reason: "powered off"}))
				wantCode(t, err, connect.CodePermissionDenied)
				_, err = c.DeclareHostUp(t.Context(), connect.NewRequest(&adminv1.DeclareHostUpRequest{Host: "kvm-a2"}))
				wantCode(t, err, connect.CodePermissionDenied)
			}
			if calls := pool.downCalls(); len(calls) != 0 {
				t.Errorf("a refused write reached the backend: %v", calls)
			}
			if got := readFile(t, tc.opts.DownFile); got != "" {
				t.Errorf("a refused write wrote the down file:\n%s", got)
			}
			if d, u := writes(s, "down", "denied"), writes(s, "up", "denied"); d != 3 || u != 3 {
				t.Errorf("denied: down %d, up %d; want 3 and 3", d, u)
			}
			logs := s.Logs.String()
			if !strings.Contains(logs, "admin write refused") || !strings.Contains(logs, "action=down host=kvm-a2") {
				t.Errorf("refusal not logged with its host:\n%s", logs)
			}
			if strings.Contains(logs, "host declared down") {
				t.Errorf("a refused declaration logged as made:\n%s", logs)
			}
		})
	}
}

// TestDeclareHostDown: an allowed declaration is saved, applied through
// the backend, logged as a WARN line with host, zone, reason and by, and
// counted; the answer and ListHosts show it. Requests without a host or
// a reason, and unknown hosts, are refused with their codes and change
// neither the backend nor the file. Up ends it, and says so.
func TestDeclareHostDown(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			file := downFile(t)
			s, pool := startPool(t, admintest.Options{AdminWrite: true, DownFile: file})
			c := adminClient(s, p.opts)
			ctx := t.Context()

			for _, tc := range []struct {
				req   *adminv1.DeclareHostDownRequest
				code  connect.Code
				field string
			}{
				{&adminv1.DeclareHostDownRequest{Reason: "powered off"}, connect.CodeInvalidArgument, "host"},
				{&adminv1.DeclareHostDownRequest{Host: "kvm-b1"}, connect.CodeInvalidArgument, "reason"},
				{&adminv1.DeclareHostDownRequest{Host: "kvm-b1", Reason: "  \t"}, connect.CodeInvalidArgument, "reason"},
				{&adminv1.DeclareHostDownRequest{Host: "kvm-zz", Reason: "powered off"}, connect.CodeNotFound, "kvm-zz"},
			} {
				_, err := c.DeclareHostDown(ctx, connect.NewRequest(tc.req))
				wantCode(t, err, tc.code)
				if !strings.Contains(err.Error(), tc.field) {
					t.Errorf("%v: %q does not name %s", tc.req, err, tc.field)
				}
				if got := readFile(t, file); strings.Contains(got, "kvm-") {
					t.Errorf("%v left the down file with:\n%s", tc.req, got)
				}
			}
			_, err := c.DeclareHostUp(ctx, connect.NewRequest(&adminv1.DeclareHostUpRequest{Host: "kvm-zz"}))
			wantCode(t, err, connect.CodeNotFound)
			// Only the unknown hosts got as far as the backend, which refused them.
			if calls := pool.downCalls(); !slices.Equal(calls, []string{"kvm-zz=true:powered off", "kvm-zz=false:"}) {
				t.Errorf("backend calls of the refused requests: %v", calls)
			}
			if got := readFile(t, file); strings.Contains(got, "kvm-") {
				t.Errorf("refused requests left the down file with:\n%s", got)
			}

			res, err := c.DeclareHostDown(ctx, connect.NewRequest(&adminv1.DeclareHostDownRequest{Host: "kvm-b1", Reason: "powered off via IPMI"}))
			if err != nil {
				t.Fatal(err)
			}
			h := res.Msg.GetHost()
			d := h.GetDown()
			if h.GetName() != "kvm-b1" || h.GetState() != "down" || d.GetBy() != admintest.TestCaller ||
				d.GetReason() != "powered off via IPMI" || d.GetSince() == nil {
				t.Errorf("after down: %v", h)
			}
			if got := readFile(t, file); !strings.Contains(got, `"host": "kvm-b1"`) || !strings.Contains(got, `"powered off via IPMI"`) {
				t.Errorf("down file:\n%s", got)
			}
			// Again, with a new reason: replaced, since kept.
			again, err := c.DeclareHostDown(ctx, connect.NewRequest(&adminv1.DeclareHostDownRequest{Host: "kvm-b1", Reason: "fenced at the PDU"}))
			if err != nil {
				t.Fatal(err)
			}
			if d2 := again.Msg.GetHost().GetDown(); d2.GetReason() != "fenced at the PDU" || !d2.GetSince().AsTime().Equal(d.GetSince().AsTime()) {
				t.Errorf("declared again: %v, first since %v", d2, d.GetSince().AsTime())
			}

			up, err := c.DeclareHostUp(ctx, connect.NewRequest(&adminv1.DeclareHostUpRequest{Host: "kvm-b1"}))
			if err != nil {
				t.Fatal(err)
			}
			if uh := up.Msg.GetHost(); uh.GetDown() != nil || uh.GetState() != "up" {
				t.Errorf("after up: %v", uh)
			}
			if got := readFile(t, file); strings.Contains(got, "kvm-b1") {
				t.Errorf("the down file still names kvm-b1:\n%s", got)
			}
			if ok, bad := writes(s, "down", "ok"), writes(s, "down", "error"); ok != 2 || bad != 4 {
				t.Errorf("down ok %d error %d, want 2 and 4", ok, bad)
			}
			if ok := writesBy(s, "up", "ok", admintest.TestCaller); ok != 1 {
				t.Errorf("up ok by %s = %d, want 1", admintest.TestCaller, ok)
			}
			logs := s.Logs.String()
			for _, want := range []string{
				`level=WARN msg="host declared down" host=kvm-b1 zone=zone-b reason="powered off via IPMI" by=` + admintest.TestCaller,
				`level=WARN msg="host declared up" host=kvm-b1 zone=zone-b by=` + admintest.TestCaller,
				`msg="admin write" action=down host=kvm-b1`,
			} {
				if !strings.Contains(logs, want) {
					t.Errorf("log lacks %s:\n%s", want, logs)
				}
			}
			if strings.Contains(logs, "host=kvm-zz zone") {
				t.Errorf("a refused declaration has a WARN line:\n%s", logs)
			}
		})
	}
}

// TestDeclareHostDownUnimplemented: a backend that cannot declare a host
// down says so, and its down file stays empty.
func TestDeclareHostDownUnimplemented(t *testing.T) {
	t.Parallel()
	type plain struct{ backend.Backend }
	file := downFile(t)
	s := admintest.Start(t, admintest.Options{AdminWrite: true, DownFile: file,
		Wrap: withBackend(func(b backend.Backend) backend.Backend { return plain{b} })})
	_, err := adminClient(s, nil).DeclareHostDown(t.Context(), connect.NewRequest(&adminv1.DeclareHostDownRequest{Host: "zone-a", Reason: "off"}))
	wantCode(t, err, connect.CodeUnimplemented)
	if !strings.Contains(err.Error(), "cannot declare a host down") {
		t.Errorf("error %q does not say why", err)
	}
	if got := readFile(t, file); got != "" {
		t.Errorf("an unimplemented declaration wrote:\n%s", got)
	}
}

// fileCheckingPool checks, at each SetDown, that the down file already
// says what the call applies: the declaration is saved before it takes
// effect.
type fileCheckingPool struct {
	*poolBackend
	t    *testing.T
	file string
}

func (b fileCheckingPool) SetDown(host string, down bool, reason string) error {
	if got := readFile(b.t, b.file); strings.Contains(got, `"host": "`+host+`"`) != down {
		b.t.Errorf("SetDown(%s, %v) before the file said so:\n%s", host, down, got)
	}
	return b.poolBackend.SetDown(host, down, reason)
}

// TestDownSavedBeforeApplied: see fileCheckingPool.
func TestDownSavedBeforeApplied(t *testing.T) {
	t.Parallel()
	file := downFile(t)
	pool := newPool()
	s := admintest.Start(t, admintest.Options{AdminWrite: true, DownFile: file,
		Wrap: withBackend(func(fb backend.Backend) backend.Backend {
			pool.Backend = fb
			return fileCheckingPool{pool, t, file}
		})})
	c := adminClient(s, nil)
	if _, err := c.DeclareHostDown(t.Context(), connect.NewRequest(&adminv1.DeclareHostDownRequest{Host: "kvm-a2", Reason: "off"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeclareHostUp(t.Context(), connect.NewRequest(&adminv1.DeclareHostUpRequest{Host: "kvm-a2"})); err != nil {
		t.Fatal(err)
	}
	if calls := pool.downCalls(); len(calls) != 2 {
		t.Errorf("SetDown calls = %v, want 2", calls)
	}
}

// TestDownSurvivesRestart: a declaration is re-applied to a new backend
// before the service serves, with who made it, when and why, and a WARN
// line; an up removes it; a damaged or foreign-version file stops the
// service with an error naming the file.
func TestDownSurvivesRestart(t *testing.T) {
	t.Parallel()
	file := downFile(t)
	if !strings.HasSuffix(file, "/state.db.down.json") || admin.DownFileFor("") != "" {
		t.Fatalf("DownFileFor: %q, and %q without --state", file, admin.DownFileFor(""))
	}
	s1, _ := startPool(t, admintest.Options{AdminWrite: true, DownFile: file})
	first, err := adminClient(s1, nil).DeclareHostDown(t.Context(), connect.NewRequest(&adminv1.DeclareHostDownRequest{Host: "kvm-b1", Reason: "pulled its power"}))
	if err != nil {
		t.Fatal(err)
	}

	s2, pool2 := startPool(t, admintest.Options{AdminWrite: true, DownFile: file})
	if calls := pool2.downCalls(); !slices.Equal(calls, []string{"kvm-b1=true:pulled its power"}) {
		t.Fatalf("restart applied %v, want kvm-b1=true:pulled its power", calls)
	}
	hs, err := adminClient(s2, nil).ListHosts(t.Context(), connect.NewRequest(&adminv1.ListHostsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	b1 := hs.Msg.GetHosts()[2]
	if d := b1.GetDown(); b1.GetName() != "kvm-b1" || b1.GetState() != "down" || d.GetReason() != "pulled its power" ||
		d.GetBy() != admintest.TestCaller || !d.GetSince().AsTime().Equal(first.Msg.GetHost().GetDown().GetSince().AsTime()) {
		t.Errorf("after restart: %v", b1)
	}
	if logs := s2.Logs.String(); !strings.Contains(logs, `level=WARN msg="host declared down (persisted)" host=kvm-b1`) {
		t.Errorf("re-applied declaration not logged:\n%s", logs)
	}
	if _, err := adminClient(s2, nil).DeclareHostUp(t.Context(), connect.NewRequest(&adminv1.DeclareHostUpRequest{Host: "kvm-b1"})); err != nil {
		t.Fatal(err)
	}
	if _, pool3 := startPool(t, admintest.Options{DownFile: file}); len(pool3.downCalls()) != 0 {
		t.Errorf("a host declared up came back down: %v", pool3.downCalls())
	}
	if left, _ := filepath.Glob(file + ".tmp-*"); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	for _, bad := range []string{`{"version":1,"down":[{"host":`, `{"version":2,"down":[]}`, `{"version":1,"down":[{"by":"x"}]}`} {
		if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = admin.New(admin.Options{Engine: s1.Engine, DownFile: file})
		if err == nil || !strings.Contains(err.Error(), "admin down declarations "+file) {
			t.Errorf("down file %s: %v, want an error naming it", bad, err)
		}
	}
}

// TestHostState: Host.state puts a declaration first, then the
// connection, then the cordon.
func TestHostState(t *testing.T) {
	t.Parallel()
	s, _ := startPool(t, admintest.Options{AdminWrite: true})
	c := adminClient(s, nil)
	if _, err := c.CordonHost(t.Context(), connect.NewRequest(&adminv1.CordonHostRequest{Host: "kvm-b1"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeclareHostDown(t.Context(), connect.NewRequest(&adminv1.DeclareHostDownRequest{Host: "zone-c", Reason: "off"})); err != nil {
		t.Fatal(err)
	}
	hs, err := c.ListHosts(t.Context(), connect.NewRequest(&adminv1.ListHostsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hs.Msg.GetHosts() {
		got = append(got, h.GetName()+"="+h.GetState())
	}
	// kvm-a1 is cordoned and not connected.
	if want := []string{"kvm-a1=unreachable", "kvm-a2=up", "kvm-b1=cordoned", "zone-c=down"}; !slices.Equal(got, want) {
		t.Errorf("states %v, want %v", got, want)
	}
}
