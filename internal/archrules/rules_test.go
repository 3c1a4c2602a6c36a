package archrules

import (
	"strings"
	"testing"
)

// rooms is who may import whom among the module's own packages: the
// drawing and tables of docs/architecture.md as data. This table is the
// source of truth; the doc describes it. A package's room is the first
// row that matches it, so narrow rows come before wide ones. Standard and
// third-party imports are not in the rooms: bans below cover those that
// matter. Beyond the rooms, every package obeys: a sub-package never
// imports its parent (any ancestor), and only test code imports a
// test-support package (one named *test, like admintest).
var rooms = []room{
	// The tools and suites: they drive everything, as cmd does.
	{"cmd/...", []string{"..."}},
	{"test/...", []string{"..."}},
	{"scripts/...", []string{"..."}},
	{"docs", []string{"..."}},
	{"deploy/...", []string{"..."}},
	{"gen/...", []string{"gen/..."}},
	{"internal/...", []string{"internal/...", "gen/..."}},

	// The server half: the wire on top, the engine below, the backend
	// vocabulary (never an implementation of it) at the bottom.
	{"server", []string{"backend", "gen/...", "server/callerid", "server/capacity", "server/convert",
		"server/lifecycle", "server/lifecycle/record", "server/tlsreload"}},
	{"server/admin", []string{"backend", "gen/...", "server/callerid", "server/convert", "server/lifecycle",
		"server/lifecycle/record", "server/lifecycle/index", "server/lifecycle/fence"}},
	{"server/admin/ui", nil},
	{"server/convert", []string{"backend", "gen/bigfleet/...", "server/capacity", "server/lifecycle/record"}},
	{"server/callerid", []string{"server/lifecycle/record"}},
	{"server/capacity", []string{"backend", "server/lifecycle/record"}},
	{"server/store", []string{"server/lifecycle/record", "gen/libvirtprovider/store/..."}},
	{"server/tlsreload", nil},
	{"server/hostfence", []string{"backend"}},
	{"server/leader", nil},
	{"server/intents", []string{"server/lifecycle/record"}},
	{"server/lifecycle", []string{"backend", "internal/backoff", "server/lifecycle/..."}},
	{"server/lifecycle/record", []string{"backend"}},
	{"server/lifecycle/caps", []string{"backend"}},
	{"server/lifecycle/reconcile", []string{"backend", "internal/backoff", "server/lifecycle/record",
		"server/lifecycle/arbiter", "server/lifecycle/caps"}},
	{"server/lifecycle/resume", []string{"backend", "internal/backoff", "server/lifecycle/record"}},
	{"server/lifecycle/...", []string{"backend", "internal/backoff", "server/lifecycle/record"}},

	// The backend half: the vocabulary is a leaf; implementations use it,
	// placement and the guest agent; libvirt's sub-packages use each other
	// but never their parent.
	{"backend", nil},
	{"backend/placement", []string{"backend"}},
	{"backend/hostsfile", []string{"backend"}},
	{"backend/guestagent", []string{"backend", "internal/backoff"}},
	{"backend/fake", []string{"backend", "backend/placement"}},
	{"backend/libvirt/...", []string{"backend", "backend/guestagent", "backend/placement",
		"backend/libvirt/...", "internal/backoff"}},
}

// protoFree: what the backend and the engine never import, tests included
// ("the backend knows nothing of protos, Connect or the engine").
var protoFree = []string{"<module>/gen/", "connectrpc.com/", "google.golang.org/protobuf/", "google.golang.org/grpc"}

var bans = []ban{
	{"backend/...", protoFree, "backend/ knows nothing of protos, Connect or gRPC (docs/architecture.md)"},
	{"server/lifecycle/...", protoFree, "the engine is proto-free (docs/architecture.md)"},
	{"server/...", []string{"libvirt.org/"}, "server/ knows nothing of libvirt (docs/architecture.md)"},
}

// parentOK: `backend` is the vocabulary every backend implements (types,
// errors, the Backend interface), so its sub-packages import it; buf's
// Connect stubs import their messages' package.
var parentOK = parents{Vocabulary: []string{"backend"}, Generated: []string{"gen/..."}}

// vetTags are make vet's: the suites behind build tags import too.
const vetTags = "integration,soak,soaklab,browser,reallibvirt,lab,golden,shapes,pool,benchboot"

// TestImportRules reads the module's import graph and fails naming every
// import that breaks a rule of docs/architecture.md. An import cycle fails
// it too: go list reports it.
func TestImportRules(t *testing.T) {
	t.Parallel()
	module, pkgs, err := goList("", vetTags)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages of %s; the walk is broken", len(pkgs), module)
	}
	for _, v := range check(module, pkgs, rooms, bans, parentOK) {
		t.Error(v)
	}
	// Every room of the table is a package that exists, or a pattern that
	// matches one: a stale row would hide a rule nobody checks.
	for _, r := range rooms {
		found := false
		for _, p := range pkgs {
			if match(r.Pkg, p.Path) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("room %q matches no package: remove it or fix its name", r.Pkg)
		}
	}
}

// TestCheckerNamesViolations is the test of the test: a graph with one
// import breaking each rule yields exactly those imports, named.
func TestCheckerNamesViolations(t *testing.T) {
	t.Parallel()
	const mod = "example.com/m"
	fake := []pkg{
		{Path: "backend"},
		{Path: "backend/lib", Imports: []string{"backend", "connectrpc.com/connect"}}, // backend: a vocabulary
		{Path: "gen/pb/pbconnect", Imports: []string{"gen/pb"}},                       // generated
		{Path: "backend/lib/sub", Imports: []string{"backend/lib"}, Tests: []string{"gen/pb"}},
		{Path: "server", Imports: []string{"backend", "server/admin/admintest"}},
		{Path: "server/admin", Imports: []string{"server", "backend"}},
		{Path: "server/admin/admintest", Imports: []string{"server", "server/admin"}},
		{Path: "server/engine", Imports: []string{"backend/lib"}, Tests: []string{"server"}},
		{Path: "gen/pb"},
		{Path: "stray"},
	}
	fakeRooms := []room{
		{"backend", nil},
		{"backend/...", []string{"backend", "backend/..."}},
		{"server", []string{"backend", "server/admin"}},
		{"server/...", []string{"backend"}},
		{"gen/...", []string{"gen/..."}},
	}
	fakeBans := []ban{{"backend/...", []string{"<module>/gen/", "connectrpc.com/"}, "backend is proto-free"}}
	want := []string{
		"backend/lib: backend/lib imports connectrpc.com/connect: backend is proto-free",
		"backend/lib/sub: backend/lib/sub imports backend/lib: a sub-package never imports its parent (docs/architecture.md)",
		"backend/lib/sub: backend/lib/sub imports gen/pb: backend is proto-free (in a test)",
		"server: server imports server/admin/admintest: only test code imports a test-support package",
		"server/admin: server/admin imports server: a sub-package never imports its parent (docs/architecture.md)",
		"server/engine: server/engine imports backend/lib: not in the room of server/..., which may import backend (docs/architecture.md)",
		"server/engine: server/engine imports server: a sub-package's test never imports its parent (docs/architecture.md)",
		"stray: stray imports -: the package is in no room of the table: add it to internal/archrules/rules_test.go and docs/architecture.md",
	}
	var got []string
	for _, v := range check(mod, fake, fakeRooms, fakeBans, parents{Vocabulary: []string{"backend"}, Generated: []string{"gen/..."}}) {
		got = append(got, v.String())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestWhereNamesTheLine: on the real tree, a violation points at the file
// and line of the import (here a legal one, reported as if it were not).
func TestWhereNamesTheLine(t *testing.T) {
	t.Parallel()
	module, pkgs, err := goList("")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		if p.Path == "server/callerid" {
			got := where(p, p.Files, module, "server/lifecycle/record")
			if !strings.HasPrefix(got, "server/callerid/guard.go:") {
				t.Errorf("where = %q, want server/callerid/guard.go:LINE", got)
			}
			return
		}
	}
	t.Fatal("server/callerid not listed")
}
