/**
 * Time for the in-memory host: `ManualClock` moves only when a test says so. It has the
 * shape of the control plane's `Clock` (`{ now(): number }`), so one clock can drive both
 * the host (CPU seconds, file times, process start times) and `startServer(config, { clock })`.
 */

/** What the in-memory host reads the time from (the control plane's `Clock`). */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** A clock that stands still until `advance` or `set`. */
export class ManualClock implements Clock {
  constructor(private ms = Date.UTC(2030, 0, 1)) {}

  now(): number {
    return this.ms;
  }

  advance(ms: number): number {
    if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`a clock only moves forward, by a finite number of ms (got ${ms})`);
    this.ms += ms;
    return this.ms;
  }

  set(ms: number): void {
    if (!Number.isFinite(ms)) throw new RangeError(`not a time: ${ms}`);
    this.ms = ms;
  }
}
