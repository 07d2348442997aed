/**
 * The logs of this host's template builds, by operation id, for the control plane to read as
 * they grow (it keeps them durably); and each running build's cancel. Bounded: a build keeps
 * its last MAX_LINES lines (line numbers keep counting), an ended build's log stays for
 * KEEP_MS, and at most MAX_BUILDS logs are kept.
 */
import type { host } from "@den/protocol";

const MAX_LINES = 20_000;
const MAX_LINE_CHARS = 16 * 1024;
const PAGE_LINES = 2000;
const KEEP_MS = 15 * 60_000;
const MAX_BUILDS = 64;

interface BuildLog {
  lines: host.BuildLogLine[];
  /** The number of the first line kept (earlier ones were dropped). */
  first: number;
  done: boolean;
  endedAt: number;
  abort: AbortController;
}

export class BuildLogs {
  private readonly builds = new Map<string, BuildLog>();

  /** Starts the log of build `op`; returns its line writer and its cancel signal. */
  start(op: string): { log: (message: string, level?: "info" | "error") => void; signal: AbortSignal } {
    this.prune();
    const b: BuildLog = { lines: [], first: 0, done: false, endedAt: 0, abort: new AbortController() };
    const had = this.builds.get(op);
    // Asked again with the same op (a retried call), the log goes on.
    const log = had && !had.done ? had : b;
    this.builds.set(op, log);
    return {
      log: (message, level = "info") => {
        log.lines.push({ at: Date.now(), level, message: message.length > MAX_LINE_CHARS ? `${message.slice(0, MAX_LINE_CHARS)}…` : message });
        if (log.lines.length > MAX_LINES) {
          log.lines.shift();
          log.first++;
        }
      },
      signal: log.abort.signal,
    };
  }

  end(op: string): void {
    const b = this.builds.get(op);
    if (!b) return;
    b.done = true;
    b.endedAt = Date.now();
  }

  page(op: string, from: number): host.BuildLogPage {
    const b = this.builds.get(op);
    if (!b) return { lines: [], next: from, done: true };
    const start = Math.max(from, b.first);
    const lines = b.lines.slice(start - b.first, start - b.first + PAGE_LINES);
    const next = start + lines.length;
    return { lines, next, done: b.done && next >= b.first + b.lines.length };
  }

  cancel(op: string): void {
    const b = this.builds.get(op);
    if (b && !b.done) b.abort.abort();
  }

  private prune(): void {
    const now = Date.now();
    for (const [op, b] of this.builds) if (b.done && now - b.endedAt > KEEP_MS) this.builds.delete(op);
    const ended = [...this.builds].filter(([, b]) => b.done).sort((a, b) => a[1].endedAt - b[1].endedAt);
    while (this.builds.size >= MAX_BUILDS && ended.length) this.builds.delete(ended.shift()![0]);
  }
}
