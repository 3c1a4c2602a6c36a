// The live-migration control of the machine detail: for an IDLE or
// CONFIGURED machine, a destination host (empty: the zone's placement
// chooses) and a Migrate button, gated like the other writes (disabled,
// with the server's reason, for a read-only caller). It answers once the
// VM runs on its new host; the result (or the refusal) is shown under it.
import { ConnectError } from "@connectrpc/connect";
import { admin } from "./api";
import { durMillis, el, human } from "./format";

export function migrateControl(id: string, gate: (b: HTMLButtonElement) => void): HTMLElement {
  const to = el("input", { class: "migrate-to" }) as HTMLInputElement;
  to.placeholder = "to host (empty: placement chooses)";
  const b = el("button", { class: "migrate", text: "Live-migrate" }) as HTMLButtonElement;
  gate(b);
  const out = el("div", { class: "small migrate-result" });
  b.onclick = async () => {
    b.disabled = true;
    out.className = "small migrate-result muted";
    out.textContent = "migrating…";
    try {
      const r = await admin.migrateMachine({ id, toHost: to.value.trim() });
      out.className = "small migrate-result ok";
      out.textContent = `moved ${r.fromHost} → ${r.toHost} in ${human(durMillis(r.took))} (${r.placement})`;
    } catch (e) {
      out.className = "small migrate-result err";
      out.textContent = ConnectError.from(e).message;
    }
    gate(b);
  };
  return el("div", { class: "migrate-box" }, el("h3", { text: "Live migration" }), el("div", { class: "actions" }, to, b), out);
}
