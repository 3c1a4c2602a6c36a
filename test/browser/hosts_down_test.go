//go:build browser

package browser

import (
	"context"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
)

// TestHostsPageDown: a host declared down with a click (the button stays
// disabled until a reason is typed) reaches the backend and shows on the
// page distinctly, with its reason, who and since; Declare up ends it.
func TestHostsPageDown(t *testing.T) {
	bin := needChromium(t)
	h := func(name string) fake.Host {
		return fake.Host{Name: name, Zone: "zone-a", VCPUs: 8, MemoryMiB: 8192, PoolGiB: 100, CPUOvercommit: 1, MemoryOvercommit: 1}
	}
	s := admintest.Start(t, admintest.Options{AdminWrite: true, Fake: fake.Options{Hosts: []fake.Host{h("kvm-a1"), h("kvm-a2")}}})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	p, err := launch(t, bin).newPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	step := stepper(t, ctx, p, "admin-hosts-down-failure.png")
	step("load hosts view", p.navigate(ctx, s.URL+"/#/hosts"))
	step("both up", p.waitFor(ctx, `[...document.querySelectorAll("#hosts tbody tr")].map(r => r.dataset.state)`, []string{"up", "up"}))

	step("write buttons shown", p.waitFor(ctx, hostRow("kvm-a1", `r.querySelector("button.declare-down") !== null`), true))
	step("open down form", p.eval(ctx, hostRow("kvm-a1", `r.querySelector("button.declare-down").click()`), nil))
	step("no reason, no declaration", p.waitFor(ctx, hostRow("kvm-a1", `r.querySelector("button.confirm-down")?.disabled`), true))
	step("type reason", p.eval(ctx, hostRow("kvm-a1", `(() => { const i = r.querySelector("input.down-reason"); i.value = "powered off via IPMI"; i.dispatchEvent(new Event("input")); })()`), nil))
	step("confirm down", p.eval(ctx, hostRow("kvm-a1", `r.querySelector("button.confirm-down").click()`), nil))
	step("kvm-a1 declared down on the page", p.waitFor(ctx, hostRow("kvm-a1",
		`[r.dataset.state, r.className, r.querySelector(".badge.down")?.title.startsWith("powered off via IPMI · by `+admintest.TestCaller+` · since "), r.querySelector("button.declare-up") !== null]`),
		[]any{"down", "down", true, true}))
	step("summary", p.waitFor(ctx, `document.getElementById("hosts-summary").textContent`, "2 hosts in 1 zones · 1 declared down"))
	if hs := s.Fake.Hosts(ctx); !hs[0].Down || hs[0].DownReason != "powered off via IPMI" {
		t.Fatalf("the page says declared down, the backend has %+v", hs[0])
	}
	shot(t, ctx, p, "admin-hosts-down.png")

	step("declare up", p.eval(ctx, hostRow("kvm-a1", `r.querySelector("button.declare-up").click()`), nil))
	step("kvm-a1 up", p.waitFor(ctx, hostRow("kvm-a1", `[r.dataset.state, r.querySelector(".badge.down") === null]`), []any{"up", true}))
	if hs := s.Fake.Hosts(ctx); hs[0].Down {
		t.Fatal("kvm-a1 still declared down in the backend")
	}
}
