//go:build browser

package browser

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
	"github.com/bigfleet/libvirt-provider/server/callerid"
)

// TestAdminPage loads the admin page in headless Chromium from a provider
// on loopback and checks what an operator would: the machine table fills
// in, a Create made through the API shows up live (CREATING, then IDLE)
// without a reload, the detail view shows the transition timeline, the
// hosts view lists the hosts, and a FAILED machine can be released from the
// page. It saves out/admin.png; with BROWSER_DOCS_SCREENSHOT=1 it also
// refreshes docs/admin-page.png for the README.
func TestAdminPage(t *testing.T) {
	bin := chromiumPath()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium not found, and CI=true: install it with scripts/deps.sh browser")
		}
		t.Skip("chromium not found: install Debian's chromium (scripts/deps.sh browser) to run the browser test")
	}
	refused := callerid.Rejection{At: time.Now(), Method: "Delete", Reason: callerid.ReasonShardMismatch,
		Presented: "bigfleet://shard/s2", Needed: "the URI SAN bigfleet://shard/s1 (the request's shard_id)", Peer: "10.0.0.7:50000", Protocol: "grpc"}
	s := admintest.Start(t, admintest.Options{AdminWrite: true, Machines: 8, Fake: fake.Options{Delays: map[string]time.Duration{
		fake.OpCreate: 1500 * time.Millisecond, fake.OpConfigure: 800 * time.Millisecond}},
		CallerMode: "bigfleet", Refusals: func() []callerid.Rejection { return []callerid.Rejection{refused} }})
	cp := bigfleetv1alpha1connect.NewCapacityProviderClient(s.HTTPClient(), s.URL, connect.WithGRPC())

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	b := launch(t, bin)
	p, err := b.newPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	step := stepper(t, ctx, p, "admin-failure.png")

	step("load page", p.navigate(ctx, s.URL+"/"))
	step("table fills in", p.waitFor(ctx, `document.querySelectorAll("#machines tbody tr").length`, 8))
	step("watch is live", p.waitFor(ctx, `document.body.dataset.watch`, "live"))
	step("header says who you are", p.waitFor(ctx, `document.getElementById("whoami").textContent === "`+admintest.TestCaller+` · may write"`, true))
	step("glance counts", p.waitFor(ctx, `document.querySelector("#glance h2").textContent`, "Fleet: 8 machines in 2 zones"))
	step("footer has the last pass's counts", p.waitFor(ctx,
		`/\(adopted 0, vanished 0, restarted 0, not running 0\)$/.test(document.querySelector("footer").textContent)`, true))
	row := func(id string) string {
		return `document.querySelector('#machines tr[data-id="` + id + `"]')?.dataset.state ?? null`
	}
	step("m-002 starts SPECULATIVE", p.waitFor(ctx, row("m-002"), "SPECULATIVE"))

	// A Create through the CapacityProvider API, as BigFleet would send it;
	// the page must show it live, through the WatchMachines stream.
	_, err = cp.Create(ctx, connect.NewRequest(&pb.CreateRequest{MachineId: "m-002", ShardId: "shard-1", ShardEpoch: 1, SequenceNumber: 1}))
	step("create", err)
	step("row turns CREATING live", p.waitFor(ctx, row("m-002"), "CREATING"))
	step("row turns IDLE live", p.waitFor(ctx, row("m-002"), "IDLE"))
	step("host shown", p.waitFor(ctx, `document.querySelector('#machines tr[data-id="m-002"] td:nth-child(5)').textContent`, "zone-a/bf-m-002"))

	// Some variety for the screenshot: a configured machine and a failure.
	_, err = cp.Configure(ctx, connect.NewRequest(&pb.ConfigureRequest{MachineId: "m-002", ClusterId: "prod-eu-1",
		BootstrapBlob: []byte("join-token"), ShardMetadata: map[string]string{"nodepool": "general"},
		ShardId: "shard-1", ShardEpoch: 1, SequenceNumber: 2}))
	step("configure", err)
	s.Fake.SetFailure(fake.OpCreate, "m-007", errors.New("storage pool bigfleet: no space left for overlay volume"))
	for _, id := range []string{"m-005", "m-007"} {
		_, err = cp.Create(ctx, connect.NewRequest(&pb.CreateRequest{MachineId: id}))
		step("create "+id, err)
	}
	step("m-002 CONFIGURED", p.waitFor(ctx, row("m-002"), "CONFIGURED"))
	step("m-007 FAILED", p.waitFor(ctx, row("m-007"), "FAILED"))
	step("m-005 IDLE", p.waitFor(ctx, row("m-005"), "IDLE"))

	// Filters narrow the table.
	step("filter", p.eval(ctx, `(() => { const s = document.getElementById("f-state"); s.value = "8"; s.dispatchEvent(new Event("input")); })()`, nil))
	step("only FAILED shown", p.waitFor(ctx, `[...document.querySelectorAll("#machines tbody tr")].map(r => r.dataset.id)`, []string{"m-007"}))
	step("clear filter", p.eval(ctx, `(() => { const s = document.getElementById("f-state"); s.value = ""; s.dispatchEvent(new Event("input")); })()`, nil))
	step("all rows back", p.waitFor(ctx, `document.querySelectorAll("#machines tbody tr").length`, 8))

	// Hosts view.
	step("hosts tab", p.eval(ctx, `location.hash = "#/hosts"`, nil))
	step("hosts listed", p.waitFor(ctx, `[...document.querySelectorAll("#hosts tbody tr")].map(r => r.children[7].textContent)`,
		[]string{"fake://zone-a", "fake://zone-b"}))

	// Fence marks: m-002's shard, the bound, the busiest machines.
	step("marks tab", p.eval(ctx, `location.hash = "#/marks"`, nil))
	step("m-002's mark", p.waitFor(ctx, `[...document.querySelectorAll("#marks tbody tr")].map(r => r.children[0].textContent + " " + r.children[1].textContent)`,
		[]string{"shard-1 m-002"}))
	step("the bound", p.waitFor(ctx, `/^at most 32 shards hold marks on one machine; 0 first contacts refused/.test(document.getElementById("marks-limit").textContent)`, true))
	step("busiest", p.waitFor(ctx, `[...document.querySelectorAll("#busiest tbody tr")].map(r => r.children[0].textContent + "=" + r.children[1].textContent)`,
		[]string{"m-002=1"}))

	// Refused callers (ADR-0048): what was presented and needed.
	step("callers tab", p.eval(ctx, `location.hash = "#/callers"`, nil))
	step("mode", p.waitFor(ctx, `document.getElementById("callers-mode").textContent`, "caller identity: bigfleet"))
	step("refusal listed", p.waitFor(ctx, `[...document.querySelectorAll("#callers tbody tr")].map(r => [1, 2, 3, 5].map(i => r.children[i].textContent).join(" | "))`,
		[]string{"Delete | shard_mismatch | bigfleet://shard/s2 | 10.0.0.7:50000"}))

	// Release the FAILED machine from its detail view (admin write on).
	step("detail m-007", p.eval(ctx, `location.hash = "#/machine/m-007"`, nil))
	step("release button", p.waitFor(ctx, `document.querySelector("#detail button.danger")?.disabled`, false))
	step("click release", p.eval(ctx, `document.querySelector("#detail button.danger").click()`, nil))
	step("m-007 back to SPECULATIVE", p.waitFor(ctx, row("m-007"), "SPECULATIVE"))

	// One more failure, left in place so the screenshot shows one.
	s.Fake.SetFailure(fake.OpCreate, "m-006", errors.New("qemu: could not open disk image: Permission denied"))
	_, err = cp.Create(ctx, connect.NewRequest(&pb.CreateRequest{MachineId: "m-006"}))
	step("create m-006", err)
	step("m-006 FAILED", p.waitFor(ctx, row("m-006"), "FAILED"))

	// The detail view of m-002 shows its timeline, newest first.
	step("detail m-002", p.eval(ctx, `location.hash = "#/machine/m-002"`, nil))
	step("timeline", p.waitFor(ctx, `[...document.querySelectorAll("#detail ol.timeline li strong")].map(e => e.textContent)`,
		[]string{"configure", "create"}))
	// The guest's addresses, read at Configure (the fake's guest has one on
	// eth0 in TEST-NET-2), in the detail and in the configure's entry.
	step("addresses", p.waitFor(ctx, `/^eth0 198\.51\.100\.\d+\/24$/.test(document.querySelector("#detail .addresses")?.textContent ?? "")`, true))
	step("addresses in timeline", p.waitFor(ctx, `[...document.querySelectorAll("#detail ol.timeline li .note")].map(e => e.textContent).filter(s => s.startsWith("addresses")).map(s => s.replace(/\d+\/24$/, "N"))`,
		[]string{"addresses: eth0 198.51.100.N"}))
	step("settle", p.eval(ctx, `new Promise(r => setTimeout(r, 1300))`, nil)) // let the change highlight fade

	png := shot(t, ctx, p, "admin.png")
	if os.Getenv("BROWSER_DOCS_SCREENSHOT") == "1" {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "admin-page.png"), png, 0o644); err != nil {
			t.Error(err)
		}
	}
	// Live migration from the detail view of the CONFIGURED machine: the
	// fake's zones hold one host each, so the server refuses, and the
	// page shows its answer under the button.
	step("migrate control", p.waitFor(ctx, `document.querySelector("#detail button.migrate")?.disabled`, false))
	step("click migrate", p.eval(ctx, `document.querySelector("#detail button.migrate").click()`, nil))
	step("migrate answered", p.waitFor(ctx, `(() => { const r = document.querySelector("#detail .migrate-result");
		return r.classList.contains("err") && r.textContent.length > 0; })()`, true))
	select {
	case msg := <-b.cdp.problems:
		t.Errorf("the page reported a problem: %s", msg)
	default:
	}
}

// TestAdminPageReadOnly: a caller the server does not let write sees who
// it is, "read-only" and why, with every write button disabled.
func TestAdminPageReadOnly(t *testing.T) {
	bin := chromiumPath()
	if bin == "" {
		t.Skip("chromium not found: install Debian's chromium (scripts/deps.sh browser) to run the browser test")
	}
	s := admintest.Start(t, admintest.Options{})
	s.Fake.SetFailure(fake.OpCreate, "m-001", errors.New("no space left"))
	cp := bigfleetv1alpha1connect.NewCapacityProviderClient(s.HTTPClient(), s.URL, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	_, err := cp.Create(ctx, connect.NewRequest(&pb.CreateRequest{MachineId: "m-001"}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := launch(t, bin).newPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	step := stepper(t, ctx, p, "admin-readonly-failure.png")
	step("load page", p.navigate(ctx, s.URL+"/#/machine/m-001"))
	step("header says anonymous", p.waitFor(ctx, `document.getElementById("whoami").textContent === "anonymous · read-only"`, true))
	step("header says why", p.waitFor(ctx, `document.getElementById("whoami").title.includes("--admin-write")`, true))
	step("m-001 FAILED", p.waitFor(ctx, `document.querySelector('#machines tr[data-id="m-001"]')?.dataset.state ?? null`, "FAILED"))
	step("release disabled", p.waitFor(ctx, `document.querySelector("#detail button.danger")?.disabled`, true))
	step("reconcile disabled", p.waitFor(ctx, `document.getElementById("reconcile").disabled`, true))
}

// stepper returns a check that ends the test at the first failed step,
// with the page's screenshot saved as failShot.
func stepper(t *testing.T, ctx context.Context, p *page, failShot string) func(what string, err error) {
	return func(what string, err error) {
		t.Helper()
		if err != nil {
			shot(t, ctx, p, failShot)
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// shot saves a screenshot under out/ (the CI artifact directory).
func shot(t *testing.T, ctx context.Context, p *page, name string) []byte {
	t.Helper()
	png, err := p.screenshot(ctx)
	if err != nil {
		t.Errorf("screenshot: %v", err)
		return nil
	}
	dir := filepath.Join("..", "..", "out")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Error(err)
		return png
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Error(err)
	}
	abs, _ := filepath.Abs(path)
	t.Logf("screenshot: %s (%d bytes)", abs, len(png))
	return png
}
