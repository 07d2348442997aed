import type { Store } from "./db/store.js";
import type { Clock } from "./operations.js";

/** Sandboxes whose latest activity is kept in memory (the oldest are forgotten first; the database has it to the second). */
const MAX_TOUCHES_KEPT = 100_000;

/**
 * Sandboxes' activity as this replica sees it: calls on their guests, and execs in flight
 * (a sandbox with one is never idle). The idle reaper judges by it (and by the database's
 * copy, for what other replicas saw).
 */
export class Activity {
  private readonly execs = new Map<string, number>();
  private readonly touched = new Map<string, { seen: number; written: number }>();

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
  ) {}

  /**
   * Marks activity: the database's copy is written at most once a second per sandbox, and
   * the latest is kept here, so choosing the least recently active (for eviction) is exact
   * to the call, not to the second.
   */
  async touch(id: string): Promise<void> {
    const now = this.clock.now();
    const prev = this.touched.get(id);
    const write = !prev || now - prev.written >= 1000;
    // Re-inserted, so the map's order is by recency and the oldest go first past the bound.
    this.touched.delete(id);
    this.touched.set(id, { seen: now, written: write ? now : prev.written });
    if (this.touched.size > MAX_TOUCHES_KEPT) this.touched.delete(this.touched.keys().next().value!);
    if (write) await this.store.sandboxes.update(id, { last_activity_at: now });
  }

  /** The latest activity seen by this replica (newer than the database's by up to a second). */
  lastActive(id: string): number | undefined {
    return this.touched.get(id)?.seen;
  }

  /** Whether an exec runs in the sandbox through this replica. */
  execing(id: string): boolean {
    return this.execs.has(id);
  }

  /**
   * Records activity for every sandbox with an exec in flight through this replica: the
   * replica that reaps may be another one, and it judges idleness by the database.
   */
  async touchActive(): Promise<void> {
    for (const id of this.execs.keys()) await this.touch(id).catch(() => undefined);
  }

  /** Brackets a running exec: a sandbox with an exec in flight is never idle. */
  async withExec<T>(id: string, fn: () => Promise<T>): Promise<T> {
    this.began(id);
    try {
      return await fn();
    } finally {
      await this.ended(id);
    }
  }

  /** Like withExec, for a streamed exec: active until the stream is consumed or dropped. */
  async *withExecStream<T>(id: string, source: AsyncGenerator<T>): AsyncGenerator<T> {
    this.began(id);
    try {
      yield* source;
    } finally {
      await this.ended(id);
    }
  }

  private began(id: string): void {
    this.execs.set(id, (this.execs.get(id) ?? 0) + 1);
  }

  private async ended(id: string): Promise<void> {
    const n = (this.execs.get(id) ?? 1) - 1;
    if (n) this.execs.set(id, n);
    else this.execs.delete(id);
    await this.touch(id).catch(() => undefined);
  }
}
