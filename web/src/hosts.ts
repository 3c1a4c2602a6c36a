// The hosts view: one row per hypervisor, sorted by zone then name, with
// used/placeable capacity bars (vCPU and memory, after overcommit), the
// machines on the host, cordoned and declared-down badges and, for a
// caller who may write, cordon/uncordon and declare down/up. Plain DOM,
// like the rest of the page.
import { ConnectError } from "@connectrpc/connect";
import { admin } from "./api";
import type { Host } from "./gen/libvirtprovider/admin/v1/admin_pb";
import { $, bytes, clock, el, tsMillis } from "./format";

export interface HostsPage {
  mayWrite(): boolean;
  // showMachines opens the machine table filtered to a host's machines.
  showMachines(filter: string): void;
}

let page: HostsPage;
// The host whose cordon form is open and what was typed, kept across the
// periodic refresh.
let cordonFor = "";
let reasonText = "";
// Likewise for the down declaration's form.
let downFor = "";
let downText = "";

export function initHosts(p: HostsPage) {
  page = p;
}

// bar draws used against placeable. A host whose capacity is not
// enforced (a zone's only --connect host) draws use against its size, in
// a neutral colour, and says so: it is not a limit.
function bar(kind: string, used: number, placeable: number, size: number, fmt: (n: number) => string, ratio: number): HTMLElement {
  const enforced = placeable > 0;
  const of = enforced ? placeable : size;
  const pct = of > 0 ? Math.min(100, (used / of) * 100) : 0;
  const level = !enforced ? "unenforced" : pct >= 90 ? "full" : pct >= 70 ? "high" : "ok";
  const label = enforced
    ? `${fmt(used)} / ${fmt(placeable)}${ratio !== 1 ? ` (×${ratio})` : ""}`
    : size > 0 ? `${fmt(used)} used of ${fmt(size)}, not enforced` : `${fmt(used)} used`;
  const free = enforced ? `${fmt(Math.max(placeable - used, 0))} free to place` : "capacity not enforced on this host";
  const fill = el("div", { class: "fill" });
  fill.style.width = `${pct.toFixed(1)}%`;
  return el("div", { class: `capbar ${level}`, title: `${kind}: ${label}; ${free}`, data: { used: String(used), placeable: String(placeable) } },
    el("div", { class: "track" }, fill), el("span", { class: "caplabel", text: label }));
}

const gib = (n: number) => `${(n / 2 ** 30).toFixed(n >= 10 * 2 ** 30 || n === 0 ? 0 : 1)} GiB`;

function labels(h: Host): string {
  return Object.keys(h.labels).sort().map((k) => `${k}=${h.labels[k]}`).join(" ");
}

// since joins a record's reason, who made it and when, for a badge.
function since(reason: string | undefined, by: string | undefined, at: Host["lastReconcileTime"]): string {
  return [reason, by ? `by ${by}` : "", at ? `since ${clock(tsMillis(at))}` : ""].filter(Boolean).join(" · ");
}

function nameCell(h: Host): HTMLElement {
  const th = el("th", {}, el("div", { class: "hostname", text: h.name }));
  if (h.down) {
    // First and loudest: the provider treats the host's guests as gone.
    const why = since(h.down.reason, h.down.by, h.down.since);
    th.firstElementChild!.append(" ", el("span", { class: "badge down", text: "declared down", title: why }));
    th.append(el("div", { class: "small err", text: `down: ${why}` }));
  }
  if (h.cordoned) {
    const c = h.cordon;
    const why = since(c?.reason, c?.by, c?.since);
    th.firstElementChild!.append(" ", el("span", { class: "badge cordoned", text: "cordoned", title: why }));
    if (why) th.append(el("div", { class: "small muted", text: why }));
  }
  if (labels(h)) th.append(el("div", { class: "small muted", text: labels(h) }));
  return th;
}

// machinesCell opens the machine table on the host's machines: with the
// host cordoned, what must move off it.
function machinesCell(h: Host): HTMLElement {
  const n = h.hostMachineCount;
  const td = el("td", { class: n ? "num link" : "num", text: String(n), title: n ? "show the machines on this host" : "" });
  if (h.cordoned && n) td.append(el("div", { class: "small warn", text: "to move off" }));
  if (n) td.onclick = () => page.showMachines(h.name === h.zone ? `${h.zone}/` : `${h.zone}/${h.name}/`);
  return td;
}

function actionsCell(h: Host): HTMLElement {
  const box = el("div", { class: "actions" });
  const td = el("td", {}, box);
  if (!page.mayWrite()) return td; // read-only callers see no write buttons
  td.append(downActions(h));
  if (h.cordoned) {
    const b = el("button", { class: "uncordon", text: "Uncordon" });
    b.onclick = () => write(b, () => admin.uncordonHost({ host: h.name }));
    box.append(b);
    return td;
  }
  if (cordonFor !== h.name) {
    const b = el("button", { class: "cordon", text: "Cordon…", title: "stop new placements on this host" });
    b.onclick = () => { cordonFor = h.name; loadHosts(); };
    box.append(b);
    return td;
  }
  const reason = el("input", { class: "reason" });
  reason.placeholder = "reason (e.g. kernel upgrade)";
  reason.value = reasonText;
  reason.oninput = () => { reasonText = reason.value; };
  const ok = el("button", { class: "confirm-cordon danger", text: "Cordon" });
  ok.onclick = () => write(ok, async () => {
    await admin.cordonHost({ host: h.name, reason: reason.value.trim() });
    cordonFor = reasonText = "";
  });
  const cancel = el("button", { text: "Cancel" });
  cancel.onclick = () => { cordonFor = reasonText = ""; loadHosts(); };
  box.append(reason, ok, cancel);
  queueMicrotask(() => { if (document.activeElement?.tagName !== "INPUT") reason.focus(); });
  return td;
}

// downActions declares a host down (a reason is required: how it is
// known to be off or fenced) or ends the declaration.
function downActions(h: Host): HTMLElement {
  const box = el("div", { class: "actions down-actions" });
  if (h.down) {
    const b = el("button", { class: "declare-up", text: "Declare up", title: "end the down declaration" });
    b.onclick = () => write(b, () => admin.declareHostUp({ host: h.name }));
    box.append(b);
    return box;
  }
  if (downFor !== h.name) {
    const b = el("button", { class: "declare-down", text: "Declare down…",
      title: "the host is off or fenced for sure: its guests are treated as gone. Never for a host that may still run guests." });
    b.onclick = () => { downFor = h.name; loadHosts(); };
    box.append(b);
    return box;
  }
  const reason = el("input", { class: "down-reason" });
  reason.placeholder = "how it is known to be off (required)";
  reason.value = downText;
  const ok = el("button", { class: "confirm-down danger", text: "Declare down" });
  ok.disabled = !downText.trim();
  reason.oninput = () => { downText = reason.value; ok.disabled = !downText.trim(); };
  ok.onclick = () => write(ok, async () => {
    await admin.declareHostDown({ host: h.name, reason: reason.value.trim() });
    downFor = downText = "";
  });
  const cancel = el("button", { text: "Cancel" });
  cancel.onclick = () => { downFor = downText = ""; loadHosts(); };
  box.append(reason, ok, cancel);
  return box;
}

async function write(b: HTMLButtonElement, call: () => Promise<unknown>) {
  b.disabled = true;
  try {
    await call();
  } catch (e) {
    alert(ConnectError.from(e).message);
  }
  await loadHosts();
}

// domainType says what a host's guests run under; a fallback from kvm
// says so (its reason is the cell's tooltip).
function domainType(t: string, note: string): string {
  if (!t) return "–";
  const shown = t === "qemu" ? "qemu (TCG)" : t;
  return note ? `${shown}, kvm unusable` : shown;
}

function row(h: Host): HTMLElement {
  const c = h.capacity;
  const poolFree = c?.poolFreeBytes ? bytes(c.poolFreeBytes) : h.poolCapacityBytes ? bytes(h.poolCapacityBytes - h.poolAllocationBytes) : "–";
  return el("tr", { class: h.down ? "down" : h.cordoned ? "cordoned" : "",
    data: { zone: h.zone, host: h.name, cordoned: String(h.cordoned), down: String(!!h.down), state: h.state } },
    el("td", { text: h.zone }),
    nameCell(h),
    el("td", { class: h.connected ? "ok" : "err", text: h.connected ? "yes" : `no: ${h.lastError}`, title: h.lastError }),
    el("td", { class: "cap vcpu" }, bar("vCPUs", c?.vcpusUsed ?? 0, c?.vcpusPlaceable ?? 0, c?.vcpus ?? 0, String, c?.cpuOvercommit ?? 0)),
    el("td", { class: "cap mem" }, bar("memory", Number(c?.memoryUsedBytes ?? 0n), Number(c?.memoryPlaceableBytes ?? 0n),
      Number(c?.memoryBytes ?? 0n), gib, c?.memoryOvercommit ?? 0)),
    el("td", { class: "num", text: poolFree }),
    machinesCell(h),
    el("td", { class: "mono small", text: h.uri }),
    el("td", { class: h.domainTypeNote ? "small warn" : "small", text: `${h.libvirtVersion || "–"} · ${domainType(h.domainType, h.domainTypeNote)}`, title: h.domainTypeNote }),
    el("td", { class: h.lastReconcileOutcome === "ok" ? "small" : "small err", text: h.lastReconcileOutcome,
      title: `last reconcile ${clock(tsMillis(h.lastReconcileTime))}: ${h.lastReconcileOutcome}` }),
    actionsCell(h),
  );
}

let seq = 0;

// loadHosts refreshes the view; only the newest answer is drawn, so a
// slow refresh never overwrites what a cordon just changed.
export async function loadHosts(): Promise<void> {
  const mine = ++seq;
  const body = $("hosts").querySelector("tbody")!;
  try {
    const res = await admin.listHosts({});
    if (mine !== seq) return;
    const cordoned = res.hosts.filter((h) => h.cordoned).length;
    const down = res.hosts.filter((h) => h.down).length;
    $("hosts-summary").textContent = `${res.hosts.length} hosts in ${new Set(res.hosts.map((h) => h.zone)).size} zones` +
      (cordoned ? ` · ${cordoned} cordoned` : "") + (down ? ` · ${down} declared down` : "");
    body.replaceChildren(...res.hosts.map(row));
    document.body.dataset.hostsLoaded = String(mine);
  } catch (e) {
    if (mine === seq) body.replaceChildren(el("tr", {}, el("td", { class: "err", text: ConnectError.from(e).message })));
  }
}
