/** How every verb prints: tables or JSON on stdout, progress and spinners on stderr. */
import type { SandboxInfo } from "@den/sdk";

export function printTable(rows: string[][]): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)));
  for (const r of rows) process.stdout.write(r.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd() + "\n");
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + "\n");
}

/** "3m12s", "2h05m", "41s": for ages, idle times and countdowns. */
export function duration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${String(Math.floor((s % 86400) / 3600)).padStart(2, "0")}h`;
}

export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[u]}`;
}

/** A sandbox as JSON: the SDK's view, dates as ISO strings. */
export function sandboxJson(s: SandboxInfo): Record<string, unknown> {
  return JSON.parse(JSON.stringify(s)) as Record<string, unknown>;
}

export const SANDBOX_HEADER = ["ID", "STATE", "TEMPLATE", "AGE", "TTL", "IDLE", "PERSISTENT", "METADATA"];

export function sandboxRow(s: SandboxInfo, now = Date.now()): string[] {
  const state = s.state === "hibernated" && s.hibernateMode ? `hibernated (${s.hibernateMode})` : s.state;
  return [
    s.id, state, s.template, duration(now - s.createdAt.getTime()), s.expiresAt ? duration(s.expiresAt.getTime() - now) : "-",
    s.state === "running" ? duration(now - s.lastActivityAt.getTime()) : "-", s.persistent ? "yes" : "no",
    Object.entries(s.metadata).map(([k, v]) => `${k}=${v}`).join(",") || "-",
  ];
}

/** Parses a repeated `key=value` option (`--meta`, `--env`). */
export function parsePairs(pairs: string[] | undefined, flag = "--meta"): Record<string, string> | undefined {
  if (!pairs?.length) return undefined;
  const out: Record<string, string> = {};
  for (const p of pairs) {
    const i = p.indexOf("=");
    if (i < 1) throw new UsageError(`${flag} wants key=value, got ${JSON.stringify(p)}`);
    out[p.slice(0, i)] = p.slice(i + 1);
  }
  return out;
}

/** A mistake in how the CLI was called: one line and exit code 1 (see bin.ts). */
export class UsageError extends Error {}

/** A configuration read at start (loadConfig): what it refuses is one line to fix, not a stack trace. */
export function configured<T>(load: () => T): T {
  try {
    return load();
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}

export const collect = (v: string, prev: string[] = []) => [...prev, v];

const FRAMES = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/**
 * Runs `fn` under a spinner with the elapsed time when stderr is a terminal (plain
 * start and end lines otherwise, so logs stay readable), and says how long it took.
 */
export async function withSpinner<T>(label: string, fn: () => Promise<T>): Promise<T> {
  const t0 = Date.now();
  const tty = process.stderr.isTTY === true;
  let i = 0;
  const timer = tty
    ? setInterval(() => process.stderr.write(`\r${FRAMES[i++ % FRAMES.length]} ${label} ${((Date.now() - t0) / 1000).toFixed(1)}s`), 100)
    : undefined;
  if (!tty) process.stderr.write(`${label}...\n`);
  try {
    const r = await fn();
    clearInterval(timer);
    process.stderr.write(`${tty ? "\r\x1b[K" : ""}${label}: done in ${((Date.now() - t0) / 1000).toFixed(1)}s\n`);
    return r;
  } catch (e) {
    clearInterval(timer);
    if (tty) process.stderr.write("\r\x1b[K");
    throw e;
  }
}

/**
 * Byte progress for transfers: a bar on a terminal (redrawn at most 10 times a second),
 * a line per 10% otherwise.
 */
export class Progress {
  private done = 0;
  private lastDraw = 0;
  private lastDecile = -1;
  private readonly t0 = Date.now();

  constructor(private readonly label: string, private readonly total: number | null) {}

  add(n: number): void {
    this.done += n;
    const now = Date.now();
    if (process.stderr.isTTY) {
      if (now - this.lastDraw < 100) return;
      this.lastDraw = now;
      const frac = this.total ? Math.min(1, this.done / this.total) : 0;
      const bar = this.total ? `[${"#".repeat(Math.round(frac * 30)).padEnd(30)}] ${Math.round(frac * 100)}% ` : "";
      process.stderr.write(`\r${this.label} ${bar}${bytes(this.done)}${this.total ? ` / ${bytes(this.total)}` : ""}\x1b[K`);
    } else if (this.total) {
      const decile = Math.floor((this.done / this.total) * 10);
      if (decile > this.lastDecile && decile < 10) {
        this.lastDecile = decile;
        process.stderr.write(`${this.label}: ${decile * 10}% of ${bytes(this.total)}\n`);
      }
    }
  }

  finish(): void {
    const secs = (Date.now() - this.t0) / 1000;
    process.stderr.write(`${process.stderr.isTTY ? "\r\x1b[K" : ""}${this.label}: ${bytes(this.done)} in ${secs.toFixed(1)}s\n`);
  }
}
