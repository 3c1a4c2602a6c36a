// The admin page: fleet at a glance, a filterable machine table kept live by
// WatchMachines (gRPC-Web server streaming), a machine detail view with its
// transition timeline, hosts and fencing marks. Plain DOM, no framework.
import "./app.css";
import { ConnectError } from "@connectrpc/connect";
import { admin } from "./api";
import { CapacityType, MachineState } from "./gen/bigfleet/v1alpha1/provider_pb";
import { type AdminMachine, type ReconcileSummary, WatchEventType } from "./gen/libvirtprovider/admin/v1/admin_pb";
import { $, clock, durMillis, el, human, stateName, states, tsMillis } from "./format";
import { initHosts, loadHosts } from "./hosts";
import { migrateControl } from "./migrate";

const MAX_ROWS = 1000;

const machines = new Map<string, AdminMachine>();
let snapshot: Map<string, AdminMachine> | null = null;
let skew = 0; // server clock minus ours, from the stream's server_time
let adminWrite = false;
// What the server says this page's caller may do (WhoAmI): the write
// buttons follow it, so an operator sees why before clicking.
let mayWrite = false;
let writeReason = "checking who you are…";
let selected: string | null = null;
let lastEvent = 0;
const flashed = new Set<string>();

// ---- live updates ----------------------------------------------------------

function setStatus(kind: "connecting" | "live" | "offline", detail = "") {
  const s = $("status");
  s.className = `status ${kind}`;
  s.textContent = kind === "live" ? "● live" : kind === "offline" ? "○ offline, retrying" : "… connecting";
  s.title = detail || "live updates (WatchMachines over gRPC-Web)";
  document.body.dataset.watch = kind;
}

async function watch(): Promise<void> {
  let backoff = 500;
  for (;;) {
    setStatus("connecting");
    const abort = new AbortController();
    lastEvent = Date.now();
    // The server sends a heartbeat every 15s: a silent minute is a dead stream.
    const stale = setInterval(() => {
      if (Date.now() - lastEvent > 60_000) abort.abort();
    }, 5_000);
    try {
      for await (const ev of admin.watchMachines({}, { signal: abort.signal })) {
        lastEvent = Date.now();
        backoff = 500;
        const st = tsMillis(ev.serverTime);
        if (st !== undefined) skew = st - Date.now();
        switch (ev.type) {
          case WatchEventType.SNAPSHOT:
            snapshot ??= new Map();
            for (const m of ev.machines) snapshot.set(m.machine!.id, m);
            break;
          case WatchEventType.SYNCED:
            machines.clear();
            for (const [id, m] of snapshot ?? []) machines.set(id, m);
            snapshot = null;
            setStatus("live");
            schedule();
            break;
          case WatchEventType.CHANGED:
            for (const m of ev.machines) {
              const id = m.machine!.id;
              const old = machines.get(id);
              // The same revision again: only the guest's boot status moved.
              const boot = old && m.revision === old.revision && (m.bootPhase !== old.bootPhase || m.bootReason !== old.bootReason);
              if (!old || m.revision > old.revision || boot) {
                machines.set(id, m);
                flashed.add(id);
              }
            }
            schedule();
            break;
        }
      }
      setStatus("offline", "the server ended the stream");
    } catch (e) {
      setStatus("offline", ConnectError.from(e).message);
    } finally {
      clearInterval(stale);
      snapshot = null;
    }
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 10_000);
  }
}

// ---- rendering -------------------------------------------------------------

let queued = false;
function schedule() {
  if (queued) return;
  queued = true;
  requestAnimationFrame(() => {
    queued = false;
    renderGlance();
    renderMachines();
    renderDetail(false);
  });
}

function now(): number {
  return Date.now() + skew;
}

function sinceOf(m: AdminMachine): number | undefined {
  return tsMillis(m.stateSince);
}

function badge(s: MachineState): HTMLElement {
  return el("span", { class: `badge st-${stateName(s).toLowerCase()}`, text: stateName(s) });
}

// stateCell is the state badge with the guest's boot phase beside it
// ("IDLE booting": the guest runs but has not passed its booted check).
function stateCell(m: AdminMachine): HTMLElement {
  const b = badge(m.machine!.state);
  if (!m.bootPhase) return b;
  return el("span", {}, b, el("span", { class: "boot", text: ` ${m.bootPhase}`, title: m.bootReason }));
}

function renderGlance() {
  const zones = [...new Set([...machines.values()].map((m) => m.machine!.zone))].sort();
  const count = new Map<string, number>();
  for (const m of machines.values()) {
    const k = `${m.machine!.zone}|${m.machine!.state}`;
    count.set(k, (count.get(k) ?? 0) + 1);
  }
  const totals = states.map((s) => zones.reduce((n, z) => n + (count.get(`${z}|${s}`) ?? 0), 0));
  const head = el("tr", {}, el("th", { text: "Zone" }), ...states.map((s) => el("th", {}, badge(s))), el("th", { text: "Total" }));
  const rows = zones.map((z) => {
    const cells = states.map((s) => countCell(count.get(`${z}|${s}`) ?? 0, s, z));
    const total = states.reduce((n, s) => n + (count.get(`${z}|${s}`) ?? 0), 0);
    return el("tr", {}, el("th", { text: z }), ...cells, el("td", { class: "num", text: String(total) }));
  });
  const all = el("tr", { class: "total" }, el("th", { text: "all zones" }),
    ...totals.map((n, i) => countCell(n, states[i], "")), el("td", { class: "num", text: String(machines.size) }));
  const table = el("table", { class: "glance" }, el("thead", {}, head), el("tbody", {}, ...rows, all));
  $("glance").replaceChildren(el("h2", { text: `Fleet: ${machines.size} machines in ${zones.length} zones` }), table);
}

function countCell(n: number, s: MachineState, zone: string): HTMLElement {
  const td = el("td", { class: n ? "num link" : "num zero", text: String(n), title: "show these machines" });
  if (n) {
    td.onclick = () => {
      (document.getElementById("f-state") as HTMLSelectElement).value = String(s);
      (document.getElementById("f-zone") as HTMLSelectElement).value = zone;
      location.hash = "#/machines";
      schedule();
    };
  }
  return td;
}

function filtered(): AdminMachine[] {
  const text = (document.getElementById("f-text") as HTMLInputElement).value.trim().toLowerCase();
  const st = (document.getElementById("f-state") as HTMLSelectElement).value;
  const zone = (document.getElementById("f-zone") as HTMLSelectElement).value;
  const out: AdminMachine[] = [];
  for (const m of machines.values()) {
    const pm = m.machine!;
    if (st && String(pm.state) !== st) continue;
    if (zone && pm.zone !== zone) continue;
    if (text) {
      const hay = `${pm.id} ${pm.host?.ref ?? ""} ${pm.cluster} ${pm.lastError} ${pm.instanceType} ${m.domain}`.toLowerCase();
      if (!hay.includes(text)) continue;
    }
    out.push(m);
  }
  return out.sort((a, b) => (a.machine!.id < b.machine!.id ? -1 : a.machine!.id > b.machine!.id ? 1 : 0));
}

function renderMachines() {
  const zoneSel = document.getElementById("f-zone") as HTMLSelectElement;
  const zones = [...new Set([...machines.values()].map((m) => m.machine!.zone))].sort();
  const have = [...zoneSel.options].slice(1).map((o) => o.value);
  if (have.join() !== zones.join()) {
    const cur = zoneSel.value;
    zoneSel.replaceChildren(el("option", { text: "all zones" }), ...zones.map((z) => el("option", { text: z })));
    (zoneSel.options[0] as HTMLOptionElement).value = "";
    zoneSel.value = zones.includes(cur) ? cur : "";
  }
  const list = filtered();
  const shown = list.slice(0, MAX_ROWS);
  const rows = shown.map((m) => {
    const pm = m.machine!;
    const since = sinceOf(m);
    const tr = el("tr", { data: { id: pm.id, state: stateName(pm.state) } },
      el("td", { class: "mono", text: pm.id }),
      el("td", { class: "state" }, stateCell(m)),
      el("td", { text: pm.zone }),
      el("td", { text: pm.instanceType }),
      el("td", { class: "mono", text: pm.host?.ref ?? "–" }),
      el("td", { text: pm.cluster || "–" }),
      el("td", { class: "since num", text: human(since === undefined ? undefined : now() - since), data: { since: String(since ?? "") } }),
      el("td", { text: m.operationKind || "–", title: m.operationId }),
      el("td", { class: "err", text: pm.lastError.length > 48 ? `${pm.lastError.slice(0, 47)}…` : pm.lastError, title: pm.lastError }),
    );
    if (pm.id === selected) tr.classList.add("selected");
    if (flashed.has(pm.id)) tr.classList.add("flash");
    tr.onclick = () => { location.hash = `#/machine/${encodeURIComponent(pm.id)}`; };
    return tr;
  });
  flashed.clear();
  $("machines").querySelector("tbody")!.replaceChildren(...rows);
  $("f-count").textContent = list.length > MAX_ROWS
    ? `${MAX_ROWS} of ${list.length} shown (narrow the filter)` : `${list.length} of ${machines.size}`;
}

let detailFor = "";
let detailRev = -1n;

async function renderDetail(force: boolean) {
  const aside = $("detail");
  if (!selected) {
    aside.hidden = true;
    return;
  }
  const m = machines.get(selected);
  if (!m) {
    aside.hidden = false;
    aside.replaceChildren(el("p", { class: "muted", text: machines.size ? `no machine ${selected}` : "loading…" }));
    return;
  }
  if (!force && detailFor === selected && detailRev === m.revision) return;
  detailFor = selected;
  detailRev = m.revision;
  const pm = m.machine!;
  const since = sinceOf(m);
  const dl = el("dl", {});
  const row = (k: string, v: string | Node) => dl.append(el("dt", { text: k }), el("dd", {}, v));
  row("state", stateCell(m));
  if (m.bootPhase) row("boot", `${m.bootPhase}: ${m.bootReason}`);
  row("in state", `${human(since === undefined ? undefined : now() - since)} (since ${clock(since)})`);
  row("zone", pm.zone);
  row("instance type", `${pm.instanceType} (${kv(pm.allocatable?.resources)})`);
  row("capacity", `${(CapacityType[pm.capacityType] ?? "?").toLowerCase().replace("_", " ")} · $${pm.pricePerHour}/h`);
  row("host", pm.host ? `${pm.host.provider} ${pm.host.ref}` : "–");
  row("domain", m.domain || "–");
  row("addresses", m.addresses.length ? el("span", { class: "mono addresses", text: m.addresses.join(", ") }) : "–");
  row("cluster", pm.cluster || "–");
  row("shard metadata", kv(pm.shardMetadata) || "–");
  row("operation", `${m.operationKind || "–"} ${m.operationId}`);
  if (m.operationDeadline) row("deadline", clock(tsMillis(m.operationDeadline)));
  if (pm.lastError) row("last error", el("pre", { class: "err", text: pm.lastError }));
  const close = el("button", { class: "close", text: "×", title: "close" });
  close.onclick = () => { location.hash = "#/machines"; };
  const parts: Node[] = [el("h2", {}, close, el("span", { class: "mono", text: pm.id })), dl];
  if (pm.state === MachineState.FAILED) {
    const b = el("button", { class: "danger", text: "Release (destroy VM, back to SPECULATIVE)" });
    writeButton(b);
    b.onclick = async () => {
      b.disabled = true;
      try {
        await admin.releaseMachine({ id: pm.id });
      } catch (e) {
        alert(ConnectError.from(e).message);
        b.disabled = false;
      }
    };
    parts.push(b);
  }
  if (pm.state === MachineState.IDLE || pm.state === MachineState.CONFIGURED) parts.push(migrateControl(pm.id, writeButton));
  const timeline = el("ol", { class: "timeline" }, el("li", { class: "muted", text: "loading history…" }));
  parts.push(el("h3", { text: "Transitions" }), timeline);
  aside.hidden = false;
  aside.replaceChildren(...parts);
  try {
    const h = await admin.getMachineHistory({ id: pm.id });
    if (detailFor !== pm.id) return;
    const items = h.transitions.slice().reverse().map((t) => el("li", { class: `oc-${t.outcome}` },
      el("div", {}, el("strong", { text: t.kind }), " ", badge(t.fromState), " → ", badge(t.toState),
        el("span", { class: "muted", text: ` ${t.outcome} · ${human(durMillis(t.duration))}` })),
      el("div", { class: "muted small", text: `${clock(tsMillis(t.started))} · ${t.operationId}` }),
      ...(t.note ? [el("div", { class: "small note", text: t.note })] : []),
      ...(t.lastError ? [el("pre", { class: "err", text: t.lastError })] : []),
    ));
    timeline.replaceChildren(...(items.length ? items : [el("li", { class: "muted", text: "no transitions yet" })]));
    if (h.transitions.length >= h.limit) timeline.append(el("li", { class: "muted", text: `(only the last ${h.limit} are kept)` }));
  } catch (e) {
    timeline.replaceChildren(el("li", { class: "err", text: ConnectError.from(e).message }));
  }
}

function kv(m: Record<string, string> | undefined): string {
  return Object.keys(m ?? {}).sort().map((k) => `${k}=${m![k]}`).join(", ");
}

async function loadMarks() {
  const body = $("marks").querySelector("tbody")!;
  try {
    const res = await admin.listFenceMarks({});
    const rows = res.shards.flatMap((s) => s.marks.map((m) => el("tr", {},
      el("td", { class: "mono", text: s.shardId }), el("td", { class: "mono", text: m.machineId }),
      el("td", { class: "num", text: String(m.epoch) }), el("td", { class: "num", text: String(m.sequence) }))));
    body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { class: "muted", text: "no fencing marks yet" }))]));
    $("marks-limit").textContent = `at most ${res.shardsPerMachineLimit} shards hold marks on one machine; ` +
      `${res.refusedAtLimit} first contacts refused at that limit since start`;
    const busiest = res.busiest.map((b) => el("tr", {},
      el("td", { class: "mono", text: b.machineId }), el("td", { class: "num", text: String(b.shards) })));
    $("busiest").querySelector("tbody")!.replaceChildren(...(busiest.length ? busiest :
      [el("tr", {}, el("td", { class: "muted", text: "no fencing marks yet" }))]));
  } catch (e) {
    body.replaceChildren(el("tr", {}, el("td", { class: "err", text: ConnectError.from(e).message })));
  }
}

// loadCallers lists the CapacityProvider calls refused because the
// caller's certificate did not allow them (BigFleet ADR-0048).
async function loadCallers() {
  const body = $("callers").querySelector("tbody")!;
  try {
    const res = await admin.listIdentityRefusals({});
    $("callers-mode").textContent = `caller identity: ${res.mode}`;
    const rows = res.refusals.map((r) => el("tr", {},
      el("td", { text: clock(tsMillis(r.time)) }), el("td", { text: r.method }), el("td", { class: "mono", text: r.reason }),
      el("td", { class: "mono", text: r.presented }), el("td", { text: r.needed }),
      el("td", { class: "mono", text: r.peer }), el("td", { text: r.protocol })));
    body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { class: "muted", text: "no refused calls" }))]));
  } catch (e) {
    body.replaceChildren(el("tr", {}, el("td", { class: "err", text: ConnectError.from(e).message })));
  }
}

// writeButton enables a write action only for a caller who may write,
// with the server's reason as the tooltip otherwise.
function writeButton(b: HTMLButtonElement) {
  b.disabled = !mayWrite;
  b.title = mayWrite ? "" : writeReason;
}

async function loadWhoAmI() {
  const who = $("whoami");
  try {
    const w = await admin.whoAmI({});
    mayWrite = w.mayWrite;
    writeReason = w.reason;
    who.textContent = `${w.identity} · ${w.mayWrite ? "may write" : "read-only"}`;
    who.title = w.mayWrite ? "your client certificate is on --admin-clients" : w.reason;
    who.className = `whoami ${w.mayWrite ? "write" : "readonly"}`;
  } catch (e) {
    mayWrite = false;
    writeReason = ConnectError.from(e).message;
    who.textContent = "identity unknown · read-only";
    who.title = writeReason;
    who.className = "whoami readonly";
  }
  const changed = document.body.dataset.mayWrite !== String(mayWrite);
  document.body.dataset.mayWrite = String(mayWrite);
  writeButton($("reconcile") as HTMLButtonElement);
  if (changed && !$("tab-hosts").hidden) loadHosts(); // cordon buttons follow
}

// showHostMachines opens the machine table filtered to one host's VMs
// (their host refs start with zone/host/).
function showHostMachines(filter: string) {
  const text = document.getElementById("f-text") as HTMLInputElement;
  text.value = filter;
  (document.getElementById("f-state") as HTMLSelectElement).value = "";
  (document.getElementById("f-zone") as HTMLSelectElement).value = "";
  location.hash = "#/machines";
  schedule();
}

// passCounts is what a reconcile pass did, for the footer and the
// reconcile button: restarts and domains still down included, since a
// host that keeps stopping guests shows there first.
function passCounts(r: ReconcileSummary | undefined): string {
  const waiting = r?.waiting.length ? `, waiting for unlisted hosts ${r.waiting.length}: ${r.waiting.join("; ")}` : "";
  return `adopted ${r?.adopted ?? 0}, vanished ${r?.vanished ?? 0}, ` +
    `restarted ${r?.restarted ?? 0}, not running ${r?.notRunning ?? 0}${waiting}`;
}

async function loadSummary() {
  try {
    await loadWhoAmI();
    const s = await admin.getFleetSummary({});
    adminWrite = s.adminWrite;
    const r = s.lastReconcile;
    $("footer").textContent = `admin writes ${adminWrite ? "enabled" : "disabled"} · last reconcile ${clock(tsMillis(r?.time))}` +
      (r ? ` (${passCounts(r)})` : "");
    renderDetail(true);
  } catch (e) {
    $("footer").textContent = ConnectError.from(e).message;
  }
}

// ---- routing and wiring ----------------------------------------------------

function route() {
  const h = location.hash || "#/machines";
  let tab = "machines";
  if (h.startsWith("#/machine/")) {
    selected = decodeURIComponent(h.slice("#/machine/".length));
  } else {
    tab = h.slice(2) || "machines";
    if (tab === "machines") selected = null;
  }
  for (const t of ["machines", "hosts", "marks", "callers"]) {
    ($(`tab-${t}`) as HTMLElement).hidden = t !== tab;
    document.querySelector(`nav a[data-tab="${t}"]`)?.classList.toggle("active", t === tab);
  }
  if (tab === "hosts") loadHosts();
  if (tab === "marks") loadMarks();
  if (tab === "callers") loadCallers();
  renderMachines();
  renderDetail(true);
}

function init() {
  initHosts({ mayWrite: () => mayWrite, showMachines: showHostMachines });
  const stateSel = document.getElementById("f-state") as HTMLSelectElement;
  for (const s of states) stateSel.append(Object.assign(el("option", { text: stateName(s) }), { value: String(s) }));
  for (const id of ["f-text", "f-state", "f-zone"]) $(id).addEventListener("input", schedule);
  $("refresh-hosts").onclick = loadHosts;
  $("refresh-marks").onclick = loadMarks;
  $("refresh-callers").onclick = loadCallers;
  $("reconcile").onclick = async () => {
    const out = $("reconcile-out");
    out.textContent = "reconciling…";
    try {
      const r = (await admin.triggerReconcile({})).reconcile;
      out.textContent = `done: ${passCounts(r)}`;
      loadHosts();
      loadSummary();
    } catch (e) {
      out.textContent = ConnectError.from(e).message;
    }
  };
  window.addEventListener("hashchange", route);
  // Time in state ticks without re-rendering the table.
  setInterval(() => {
    for (const td of document.querySelectorAll<HTMLElement>("td.since")) {
      const s = Number(td.dataset.since);
      if (s) td.textContent = human(now() - s);
    }
  }, 1000);
  setInterval(() => { if (!$("tab-hosts").hidden) loadHosts(); }, 15_000);
  setInterval(loadSummary, 30_000);
  route();
  loadSummary();
  watch();
}

init();
