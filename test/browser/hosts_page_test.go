//go:build browser

package browser

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
)

func needChromium(t *testing.T) string {
	t.Helper()
	bin := chromiumPath()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium not found, and CI=true: install it with scripts/deps.sh browser")
		}
		t.Skip("chromium not found: install Debian's chromium (scripts/deps.sh browser) to run the browser test")
	}
	return bin
}

// hostRow is a JavaScript expression reading one host row's field.
func hostRow(host, expr string) string {
	return `(() => { const r = document.querySelector('#hosts tr[data-host="` + host + `"]'); return r ? ` + expr + ` : null; })()`
}

// TestHostsPageCordon: the hosts view of a zone pool (the fake with four
// hosts in two zones, one cordoned as a hosts file would) shows each
// host's capacity bars, machines and cordon; a cordon made with a click
// reaches the backend, with its reason on the page, and placement then
// avoids the host; the machine count opens what must move off. It saves
// out/admin-hosts.png; with BROWSER_DOCS_SCREENSHOT=1 also
// docs/admin-hosts.png for the README.
func TestHostsPageCordon(t *testing.T) {
	bin := needChromium(t)
	h := func(name, zone string, vcpus int, mem int64, cpuRatio float64, cordoned bool, rack string) fake.Host {
		return fake.Host{Name: name, Zone: zone, VCPUs: vcpus, MemoryMiB: mem, PoolGiB: 400, CPUOvercommit: cpuRatio,
			MemoryOvercommit: 1, Cordoned: cordoned, Labels: map[string]string{"rack": rack}}
	}
	s := admintest.Start(t, admintest.Options{AdminWrite: true, Machines: 16, Fake: fake.Options{Hosts: []fake.Host{
		h("kvm-a1", "zone-a", 8, 12288, 2, false, "r11"), h("kvm-a2", "zone-a", 8, 16384, 2, false, "r12"),
		h("kvm-b1", "zone-b", 4, 8192, 1, false, "r21"), h("kvm-b2", "zone-b", 16, 32768, 4, true, "r22"),
	}}})
	cp := bigfleetv1alpha1connect.NewCapacityProviderClient(s.HTTPClient(), s.URL, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	// Zone a gets m-000…m-008 (even ids), zone b m-001 and m-003: spread
	// puts zone a's on both hosts, zone b's on kvm-b1 (kvm-b2 is cordoned).
	// One at a time, so the placements are known: in zone a (12 and 16 GiB)
	// a2, a2, then a tie broken by fewer machines: a1, a2, a1.
	for _, id := range []string{"m-000", "m-002", "m-004", "m-006", "m-008", "m-001", "m-003"} {
		if _, err := cp.Create(ctx, connect.NewRequest(&pb.CreateRequest{MachineId: id})); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, s, id)
	}

	p, err := launch(t, bin).newPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	step := stepper(t, ctx, p, "admin-hosts-failure.png")
	step("load hosts view", p.navigate(ctx, s.URL+"/#/hosts"))
	step("one row per host, by zone then name", p.waitFor(ctx, `[...document.querySelectorAll("#hosts tbody tr")].map(r => r.dataset.host)`,
		[]string{"kvm-a1", "kvm-a2", "kvm-b1", "kvm-b2"}))
	step("summary", p.waitFor(ctx, `document.getElementById("hosts-summary").textContent`, "4 hosts in 2 zones · 1 cordoned"))
	// kvm-b1: 2 small machines (2 vCPUs, 2 GiB each) of 4 vCPUs ×1 and 8 GiB.
	step("vCPU bar", p.waitFor(ctx, hostRow("kvm-b1", `[r.querySelector("td.vcpu .capbar").dataset.used, r.querySelector("td.vcpu .capbar").dataset.placeable, r.querySelector("td.vcpu .capbar").className, r.querySelector("td.vcpu .fill").style.width]`),
		[]string{"4", "4", "capbar full", "100%"}))
	step("memory bar", p.waitFor(ctx, hostRow("kvm-b1", `r.querySelector("td.mem .caplabel").textContent`), "4.0 GiB / 8.0 GiB"))
	step("overcommit shown", p.waitFor(ctx, hostRow("kvm-b2", `r.querySelector("td.vcpu .caplabel").textContent`), "0 / 64 (×4)"))
	step("machines per host", p.waitFor(ctx, `[...document.querySelectorAll("#hosts tbody tr")].map(r => r.children[6].firstChild.textContent)`,
		[]string{"2", "3", "2", "0"}))
	step("hosts-file cordon", p.waitFor(ctx, hostRow("kvm-b2", `[r.dataset.cordoned, r.querySelector(".badge.cordoned")?.title, r.querySelector("button.uncordon") !== null]`),
		[]any{"true", "cordoned: true in the hosts file · by hosts file", true}))

	// Cordon kvm-a1 with a reason, by clicking.
	step("open cordon form", p.eval(ctx, hostRow("kvm-a1", `r.querySelector("button.cordon").click()`), nil))
	step("cordon form open", p.waitFor(ctx, hostRow("kvm-a1", `r.querySelector("input.reason") !== null`), true))
	step("type reason", p.eval(ctx, hostRow("kvm-a1", `(() => { const i = r.querySelector("input.reason"); i.value = "BIOS update"; i.dispatchEvent(new Event("input")); })()`), nil))
	step("confirm cordon", p.eval(ctx, hostRow("kvm-a1", `r.querySelector("button.confirm-cordon").click()`), nil))
	step("kvm-a1 cordoned on the page", p.waitFor(ctx, hostRow("kvm-a1", `[r.dataset.cordoned, r.querySelector(".badge.cordoned")?.title.startsWith("BIOS update · by `+admintest.TestCaller+` · since ")]`),
		[]any{"true", true}))
	if !cordonedInBackend(s, "kvm-a1") {
		t.Fatal("the page says cordoned, the backend does not")
	}
	// Placement now avoids kvm-a1, though it has room.
	_, err = cp.Create(ctx, connect.NewRequest(&pb.CreateRequest{MachineId: "m-010"}))
	step("create m-010", err)
	waitIdle(t, s, "m-010")
	if m, _ := s.Engine.Get(ctx, "m-010"); m.HostName != "kvm-a2" {
		t.Errorf("m-010 placed on %q, want kvm-a2: kvm-a1 is cordoned", m.HostName)
	}
	step("refresh", p.eval(ctx, `document.getElementById("refresh-hosts").click()`, nil))
	step("kvm-a2 has m-010", p.waitFor(ctx, hostRow("kvm-a2", `r.children[6].firstChild.textContent`), "4"))
	step("to move off", p.waitFor(ctx, hostRow("kvm-a1", `r.children[6].textContent`), "2to move off"))

	// Uncordon the hosts-file cordon, then cordon it again for the picture.
	step("uncordon kvm-b2", p.eval(ctx, hostRow("kvm-b2", `r.querySelector("button.uncordon").click()`), nil))
	step("kvm-b2 uncordoned", p.waitFor(ctx, hostRow("kvm-b2", `[r.dataset.cordoned, r.querySelector("button.cordon") !== null]`), []any{"false", true}))
	if cordonedInBackend(s, "kvm-b2") {
		t.Fatal("kvm-b2 still cordoned in the backend")
	}
	step("settle", p.eval(ctx, `(() => { window.scrollTo(0, 0); return new Promise(r => setTimeout(r, 300)); })()`, nil))
	png := shot(t, ctx, p, "admin-hosts.png")
	if os.Getenv("BROWSER_DOCS_SCREENSHOT") == "1" {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "admin-hosts.png"), png, 0o644); err != nil {
			t.Error(err)
		}
	}

	// The machine count opens the machine table on what must move off.
	step("open kvm-a1's machines", p.eval(ctx, hostRow("kvm-a1", `r.children[6].click()`), nil))
	step("machines of kvm-a1", p.waitFor(ctx, `location.hash === "#/machines" && [...document.querySelectorAll("#machines tbody tr")].every(r => r.children[4].textContent.startsWith("zone-a/kvm-a1/")) && document.querySelectorAll("#machines tbody tr").length`, 2))
	select {
	case msg := <-launchProblems(p):
		t.Errorf("the page reported a problem: %s", msg)
	default:
	}
}

func launchProblems(p *page) chan string { return p.c.problems }

func cordonedInBackend(s *admintest.Server, host string) bool {
	for _, h := range s.Fake.Hosts(context.Background()) {
		if h.Name == host {
			return h.Cordoned
		}
	}
	return false
}

func waitIdle(t *testing.T, s *admintest.Server, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := s.Engine.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if pb.MachineState(m.State) == pb.MachineState_MACHINE_STATE_IDLE {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, want IDLE (last error %q)", id, m.State, m.LastError)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const hostsFile = `hosts:
  - name: kvm-a1
    zone: zone-a
    uri: qemu+ssh://bigfleet@kvm-a1.example/system?keyfile=/etc/bigfleet/ssh/id_ed25519
    labels: {rack: r12}
    overcommit: {cpu: 4.0, memory: 1.0}
    fake: {vcpus: 16, memory_mib: 65536, pool_gib: 500}
  - name: kvm-a2
    zone: zone-a
    uri: qemu+ssh://bigfleet@kvm-a2.example/system
    fake: {vcpus: 8, memory_mib: 32768, pool_gib: 200}
  - name: kvm-b1
    zone: zone-b
    uri: qemu+ssh://bigfleet@kvm-b1.example/system
    cordoned: true
`

// TestHostsPageFromHostsFile runs the provider binary as an operator
// would, on the fake backend with a --hosts file, and reads its hosts view
// as an anonymous caller: the hosts of the file with their fake sizes and
// ratios, the file's cordon, the URI redacted, no write buttons; a Create
// shows up in its host's bar.
func TestHostsPageFromHostsFile(t *testing.T) {
	bin := needChromium(t)
	provider := os.Getenv("BF_LIBVIRT_BIN")
	if provider == "" {
		provider = filepath.Join(t.TempDir(), "libvirt")
		build := exec.Command("go", "build", "-o", provider, "./cmd/libvirt")
		build.Dir = filepath.Join("..", "..")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/libvirt: %v\n%s", err, out)
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "hosts.yaml")
	if err := os.WriteFile(file, []byte(hostsFile), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	url := startProvider(t, ctx, provider, "--use-fake-backend", "--hosts", file, "--addr", "127.0.0.1:0",
		"--metrics-addr=", "--seed-count=8", "--state", filepath.Join(dir, "state.db"))

	cp := bigfleetv1alpha1connect.NewCapacityProviderClient(http.DefaultClient, url) // Connect over HTTP/1.1
	list, err := cp.List(ctx, connect.NewRequest(&pb.ListFilter{}))
	if err != nil {
		t.Fatal(err)
	}
	var idA string
	for _, m := range list.Msg.GetMachines() {
		if m.GetZone() == "zone-a" && m.GetState() == pb.MachineState_MACHINE_STATE_SPECULATIVE {
			idA = m.GetId()
			break
		}
	}
	if idA == "" {
		t.Fatalf("no SPECULATIVE slot in zone-a: %v", list.Msg)
	}

	p, err := launch(t, bin).newPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	step := stepper(t, ctx, p, "admin-hosts-file-failure.png")
	step("load hosts view", p.navigate(ctx, url+"/#/hosts"))
	step("hosts of the file", p.waitFor(ctx, `[...document.querySelectorAll("#hosts tbody tr")].map(r => r.dataset.zone + "/" + r.dataset.host)`,
		[]string{"zone-a/kvm-a1", "zone-a/kvm-a2", "zone-b/kvm-b1"}))
	step("read-only", p.waitFor(ctx, `document.body.dataset.mayWrite === "false" && document.querySelectorAll("#hosts button.cordon, #hosts button.uncordon").length`, 0))
	step("fake size × overcommit", p.waitFor(ctx, hostRow("kvm-a1", `r.querySelector("td.vcpu .caplabel").textContent`), "0 / 64 (×4)"))
	step("default overcommit", p.waitFor(ctx, hostRow("kvm-a2", `r.querySelector("td.mem .caplabel").textContent`), "0 GiB / 32 GiB"))
	step("file cordon", p.waitFor(ctx, hostRow("kvm-b1", `r.querySelector(".badge.cordoned")?.title`), "cordoned: true in the hosts file · by hosts file"))
	step("uri redacted", p.waitFor(ctx, hostRow("kvm-a1", `r.children[7].textContent.includes("keyfile")`), false))

	if _, err := cp.Create(ctx, connect.NewRequest(&pb.CreateRequest{MachineId: idA})); err != nil {
		t.Fatal(err)
	}
	// Spread: the host with the most free memory (kvm-a1, 64 GiB).
	step("refresh until the Create shows", p.waitFor(ctx, `(async () => { document.getElementById("refresh-hosts").click(); await new Promise(r => setTimeout(r, 100));
		const r = document.querySelector('#hosts tr[data-host="kvm-a1"]'); return r.children[6].firstChild.textContent; })()`, "1"))
	shot(t, ctx, p, "admin-hosts-file.png")
}

var listening = regexp.MustCompile(`libvirt provider listening on (\S+) `)

// startProvider runs the binary until the test ends and returns its URL,
// read from its banner.
func startProvider(t *testing.T, ctx context.Context, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuf
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("provider log:\n%s", logs.String())
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + strings.TrimSpace(a)
	case <-ctx.Done():
		t.Fatalf("the provider did not start:\n%s", logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the provider did not print its address in 30s:\n%s", logs.String())
	}
	return ""
}
