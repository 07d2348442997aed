/**
 * Warm snapshots being written behind their hibernations' answers, by sandbox: a wake
 * meanwhile cancels one; a move to the store waits for it.
 */
import type { Runtime } from "@den/runtime";

export class WarmSnapshots {
  private readonly jobs = new Map<string, Promise<void>>();

  constructor(private readonly rt: Runtime) {}

  /** Writes sandbox `id`'s (paused) VM's local snapshot `snapshotId` in the background. */
  write(id: string, snapshotId: string): void {
    const sbx = this.rt.get(id);
    const job = this.rt.snapshot(id, { keepRunning: false, id: snapshotId }).then(() => undefined, (err: unknown) => {
      if (sbx.state !== "destroyed" && this.jobs.get(id) === job) process.emitWarning(`sandbox ${id}: its warm snapshot failed (${(err as Error).message.slice(0, 300)}); it stays paused in place`, "DenWarmSnapshotWarning");
    }).finally(() => {
      if (this.jobs.get(id) === job) this.jobs.delete(id);
    });
    this.jobs.set(id, job);
  }

  /** Resolves once sandbox `id`'s warm snapshot (if one is being written) has ended, either way. */
  async written(id: string): Promise<void> {
    await this.jobs.get(id);
  }

  /** Lets go of a warm snapshot still being written (it fails, leaving nothing). */
  async cancel(id: string): Promise<void> {
    const job = this.jobs.get(id);
    if (!job) return;
    this.jobs.delete(id);
    if (this.rt.has(id)) await this.rt.get(id).cancelSnapshot();
    await job;
  }
}
