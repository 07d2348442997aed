import { DenError } from "./errors.js";
import type { GuestChunk, GuestExit } from "./host.js";

/**
 * How the reader's pace reaches whoever produces a streamed exec's output. Over the guest
 * agent's socket it is credit: each chunk the reader is done with is granted back
 * (`release`). Over a WebSocket it is the socket itself: past `high` queued bytes reading
 * stops (`pause`), below `low` it goes on (`resume`), and TCP holds the sender back meanwhile.
 */
export interface ExecOutputFlow {
  /** Queued bytes past which `pause` is called. */
  high?: number;
  /** Queued bytes below which a paused source is resumed. */
  low?: number;
  pause?(): void;
  resume?(): void;
  /** A chunk the reader is done with, or one dropped unread: its room is the producer's again. */
  release?(chunk: GuestChunk): void;
}

/**
 * The reading side of a streamed exec, shared by every transport: an output queue read by
 * async iteration at the reader's pace, the exit (or the error that ended it) and its
 * waiters, and discarding the output of a process nobody reads so it can still finish.
 */
export class ExecOutput implements AsyncIterable<GuestChunk> {
  private queue: GuestChunk[] = [];
  private queuedBytes = 0;
  private paused = false;
  private wake: (() => void) | undefined;
  private exitInfo: GuestExit | undefined;
  private failure: Error | undefined;
  private exitWaiters: Array<{ resolve: (e: GuestExit) => void; reject: (e: Error) => void }> = [];
  private iterating = false;
  /** wait() was called with no reader: output is released and dropped as it arrives. */
  private discarding = false;

  constructor(private readonly flow: ExecOutputFlow = {}) {}

  /** How it exited, once it has. */
  get exit(): GuestExit | undefined {
    return this.exitInfo;
  }

  /** What ended it without an exit (a dropped connection, a protocol error), if anything did. */
  get error(): Error | undefined {
    return this.failure;
  }

  /** Whether it has exited or failed: nothing more comes. */
  get ended(): boolean {
    return this.exitInfo !== undefined || this.failure !== undefined;
  }

  /** A chunk of output arrives. */
  push(chunk: GuestChunk): void {
    if (this.discarding) {
      this.flow.release?.(chunk);
      return;
    }
    this.queue.push(chunk);
    this.queuedBytes += chunk.data.length;
    if (this.flow.high !== undefined && this.queuedBytes > this.flow.high && !this.paused) {
      this.paused = true;
      this.flow.pause?.();
    }
    this.wake?.();
  }

  /**
   * Ends the output with the process's exit, or with the error that cut it off; the first
   * call wins (returns false for any later one). The reader gets what was queued first.
   */
  finish(exit: GuestExit | undefined, error?: Error): boolean {
    if (this.ended) return false;
    this.exitInfo = exit;
    this.failure = error;
    for (const w of this.exitWaiters.splice(0)) {
      if (exit) w.resolve(exit);
      else w.reject(error!);
    }
    this.unpause();
    this.wake?.();
    return true;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<GuestChunk> {
    if (this.iterating || this.discarding) throw new DenError("invalid_state", "exec output is already being read or was discarded by wait()");
    this.iterating = true;
    for (;;) {
      const c = this.queue.shift();
      if (c) {
        this.queuedBytes -= c.data.length;
        if (this.flow.low !== undefined && this.queuedBytes < this.flow.low) this.unpause();
        yield c;
        // Only once the reader asks for more is its room given back: a slow reader slows the producer.
        this.flow.release?.(c);
        continue;
      }
      if (this.failure) throw this.failure;
      if (this.exitInfo) return;
      await new Promise<void>((r) => (this.wake = r));
      this.wake = undefined;
    }
  }

  /**
   * Resolves when the process has exited (its output fully delivered). Called without a
   * reader attached, it discards the output so the process can finish.
   */
  wait(): Promise<GuestExit> {
    if (this.exitInfo) return Promise.resolve(this.exitInfo);
    if (this.failure) return Promise.reject(this.failure);
    if (!this.iterating) {
      this.discarding = true;
      for (const c of this.queue.splice(0)) this.flow.release?.(c);
      this.queuedBytes = 0;
      this.unpause();
    }
    return new Promise((resolve, reject) => this.exitWaiters.push({ resolve, reject }));
  }

  private unpause(): void {
    if (!this.paused) return;
    this.paused = false;
    this.flow.resume?.();
  }
}
