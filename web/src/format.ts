import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";
import { MachineState } from "./gen/bigfleet/v1alpha1/provider_pb";

export const states: MachineState[] = [
  MachineState.SPECULATIVE, MachineState.CREATING, MachineState.IDLE, MachineState.CONFIGURING,
  MachineState.CONFIGURED, MachineState.DRAINING, MachineState.DELETING, MachineState.FAILED,
];

export function stateName(s: MachineState): string {
  return (MachineState[s] ?? "UNKNOWN").toString();
}

export function tsMillis(t: Timestamp | undefined): number | undefined {
  return t ? Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6) : undefined;
}

export function durMillis(d: Duration | undefined): number | undefined {
  return d ? Number(d.seconds) * 1000 + Math.floor(d.nanos / 1e6) : undefined;
}

/** human renders a duration as an operator reads it: 850ms, 12s, 3m12s, 2h05m, 3d04h. */
export function human(ms: number | undefined): string {
  if (ms === undefined) return "–";
  if (ms < 0) ms = 0;
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  const pad = (n: number) => String(n).padStart(2, "0");
  if (s < 3600) return `${Math.floor(s / 60)}m${pad(s % 60)}s`;
  const m = Math.round(s / 60);
  if (m < 1440) return `${Math.floor(m / 60)}h${pad(m % 60)}m`;
  const h = Math.round(m / 60);
  return `${Math.floor(h / 24)}d${pad(h % 24)}h`;
}

export function clock(ms: number | undefined): string {
  if (ms === undefined) return "–";
  const d = new Date(ms);
  return d.toLocaleString(undefined, { hour12: false });
}

export function bytes(n: bigint): string {
  let v = Number(n);
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

/** el builds an element; text is set with textContent, never as HTML. */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K, props: { class?: string; text?: string; title?: string; data?: Record<string, string> } = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (props.class) e.className = props.class;
  if (props.text !== undefined) e.textContent = props.text;
  if (props.title) e.title = props.title;
  for (const [k, v] of Object.entries(props.data ?? {})) e.dataset[k] = v;
  e.append(...children);
  return e;
}

export function $(id: string): HTMLElement {
  const e = document.getElementById(id);
  if (!e) throw new Error(`#${id} missing`);
  return e;
}
