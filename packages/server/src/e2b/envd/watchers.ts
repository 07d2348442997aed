/**
 * Directory watching by polling from the host: a watcher lists its directory (recursively
 * if asked) every POLL_MS and reports the difference as envd's events. The guest has no
 * inotify op, and a diff of listings needs none; what it cannot see is a change undone
 * between two polls. Bounded: entries per listing (walk.ts), watchers per sandbox, events
 * kept for a polling watcher, and an idle polling watcher expires.
 */
import { randomUUID } from "node:crypto";
import type { DirEntry, HostGuest, e2b } from "@den/protocol";
import { ConnectError } from "./connect.js";
import { MAX_WALK_DEPTH, walk } from "./walk.js";

export const POLL_MS = 500;
export const MAX_WATCHERS = 16;
/** Events a polling watcher keeps until they are fetched; older ones are dropped. */
export const MAX_KEPT_EVENTS = 1000;
/** A polling watcher nobody asked for events for this long is removed. */
const IDLE_MS = 10 * 60_000;

type Snapshot = Map<string, DirEntry>;
export interface RawEvent { name: string; type: e2b.EventType; path: string }

async function snapshot(guest: HostGuest, root: string, recursive: boolean): Promise<Snapshot> {
  const m: Snapshot = new Map();
  for (const w of await walk(guest, root, recursive ? MAX_WALK_DEPTH : 1)) m.set(w.rel, w.entry);
  return m;
}

const key = (e: DirEntry) => `${e.type}:${e.size}:${e.mtime_ms}`;

/** What changed from `a` to `b`, as inotify-style events (a new non-empty file is create + write). */
export function diff(a: Snapshot, b: Snapshot, root: string): RawEvent[] {
  const ev: RawEvent[] = [];
  const at = (name: string, type: e2b.EventType) => ev.push({ name, type, path: root === "/" ? `/${name}` : `${root}/${name}` });
  const gone = [...a.keys()].filter((k) => !b.has(k));
  const added = [...b.keys()].filter((k) => !a.has(k));
  // A name that vanished while one with the same type, size and mtime appeared was renamed.
  const renamedTo = new Map<string, string>();
  for (const g of gone) {
    const k = key(a.get(g)!);
    const to = added.find((n) => !renamedTo.has(n) && key(b.get(n)!) === k);
    if (to !== undefined) renamedTo.set(to, g);
  }
  const renamedFrom = new Set(renamedTo.values());
  for (const g of gone) at(g, renamedFrom.has(g) ? "EVENT_TYPE_RENAME" : "EVENT_TYPE_REMOVE");
  for (const n of added) {
    at(n, "EVENT_TYPE_CREATE");
    const e = b.get(n)!;
    if (!renamedTo.has(n) && e.type === "file" && e.size > 0) at(n, "EVENT_TYPE_WRITE");
  }
  for (const [n, e] of b) {
    const old = a.get(n);
    if (!old) continue;
    if (old.type !== e.type) {
      at(n, "EVENT_TYPE_REMOVE");
      at(n, "EVENT_TYPE_CREATE");
    } else if (e.type !== "dir" && (old.size !== e.size || old.mtime_ms !== e.mtime_ms)) {
      at(n, "EVENT_TYPE_WRITE");
    } else if (old.mode !== e.mode) {
      at(n, "EVENT_TYPE_CHMOD");
    }
  }
  return ev;
}

/** Polls one directory until stopped; `onEvents` gets each poll's changes (awaited: no overlap). */
export class DirPoller {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private last: Snapshot = new Map();

  constructor(private readonly guest: HostGuest, readonly root: string, private readonly recursive: boolean,
    private readonly onEvents: (ev: RawEvent[]) => Promise<void>, private readonly onError: (e: unknown) => void) {}

  /** Takes the first listing (so a missing directory fails here) and starts polling. */
  async start(): Promise<void> {
    const s = await this.guest.files.stat(this.root);
    if (s.type !== "dir") throw new ConnectError("invalid_argument", `${this.root} is not a directory`);
    this.last = await snapshot(this.guest, this.root, this.recursive);
    this.schedule();
  }

  /** A big tree polls less often: never more than a third of the guest's time goes to listing it. */
  private schedule(tookMs = 0): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.poll(), Math.max(POLL_MS, 2 * tookMs));
  }

  private async poll(): Promise<void> {
    const t0 = Date.now();
    try {
      const next = await snapshot(this.guest, this.root, this.recursive);
      const ev = diff(this.last, next, this.root);
      this.last = next;
      const took = Date.now() - t0;
      if (ev.length && !this.stopped) await this.onEvents(ev);
      this.schedule(took);
    } catch (e) {
      if (!this.stopped) this.onError(e);
    }
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

/** A watcher made by CreateWatcher: events wait here for GetWatcherEvents. */
interface Polling {
  poller: DirPoller;
  events: e2b.FilesystemEvent[];
  error: ConnectError | undefined;
  lastAsked: number;
}

/** Every watcher of one sandbox: streamed (WatchDir) ones count against the same bound. */
export class WatcherTable {
  private streams = 0;
  private readonly polling = new Map<string, Polling>();
  private readonly streamPollers = new Set<DirPoller>();

  private reapIdle(): void {
    const now = Date.now();
    for (const [id, w] of this.polling) if (now - w.lastAsked > IDLE_MS) this.remove(id);
  }

  private reserve(): void {
    this.reapIdle();
    if (this.streams + this.polling.size >= MAX_WATCHERS) throw new ConnectError("resource_exhausted", `at most ${MAX_WATCHERS} watchers per sandbox`);
  }

  /** A WatchDir stream's poller; `release` when the stream ends. */
  async openStream(make: () => DirPoller): Promise<{ poller: DirPoller; release: () => void }> {
    this.reserve();
    this.streams++;
    const poller = make();
    this.streamPollers.add(poller);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.streams--;
      this.streamPollers.delete(poller);
      poller.stop();
    };
    try {
      await poller.start();
    } catch (e) {
      release();
      throw e;
    }
    return { poller, release };
  }

  async create(make: (onEvents: (ev: e2b.FilesystemEvent[]) => void, onError: (e: unknown) => void) => DirPoller, toError: (e: unknown) => ConnectError): Promise<string> {
    this.reserve();
    const id = randomUUID();
    const w: Polling = { poller: undefined as unknown as DirPoller, events: [], error: undefined, lastAsked: Date.now() };
    w.poller = make((ev) => {
      w.events.push(...ev);
      if (w.events.length > MAX_KEPT_EVENTS) w.events.splice(0, w.events.length - MAX_KEPT_EVENTS);
    }, (e) => (w.error = toError(e)));
    this.polling.set(id, w);
    try {
      await w.poller.start();
    } catch (e) {
      this.polling.delete(id);
      throw e;
    }
    return id;
  }

  take(id: string): e2b.FilesystemEvent[] {
    const w = this.polling.get(id);
    if (!w) throw new ConnectError("not_found", `watcher ${JSON.stringify(id)} not found`);
    w.lastAsked = Date.now();
    if (w.error) {
      this.remove(id);
      throw w.error;
    }
    return w.events.splice(0);
  }

  remove(id: string): void {
    const w = this.polling.get(id);
    if (!w) throw new ConnectError("not_found", `watcher ${JSON.stringify(id)} not found`);
    w.poller.stop();
    this.polling.delete(id);
  }

  clear(): void {
    for (const w of this.polling.values()) w.poller.stop();
    this.polling.clear();
    for (const p of this.streamPollers) p.stop();
    this.streamPollers.clear();
  }
}
