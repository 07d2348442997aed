import { api } from "@den/protocol";
import { DenClient, listOf, seg, type DenClientOptions, type RequestOptions } from "./client.js";

/** A durable checkpoint of a sandbox, kept in the server's snapshot store. */
export interface CheckpointInfo {
  id: string;
  name: string | null;
  sandboxId: string;
  template: string;
  templateVersion: string;
  vcpus: number;
  memoryMb: number;
  diskMb: number;
  /** How long the sandbox was paused while its state was copied. */
  pauseMs: number;
  storedBytes: number;
  createdAt: Date;
}

export function toCheckpointInfo(w: api.Checkpoint): CheckpointInfo {
  return {
    id: w.id, name: w.name, sandboxId: w.sandbox_id, template: w.template, templateVersion: w.template_version,
    vcpus: w.vcpus, memoryMb: w.memory_mb, diskMb: w.disk_mb, pauseMs: w.pause_ms, storedBytes: w.stored_bytes,
    createdAt: new Date(w.created_at),
  };
}

/**
 * Checkpoints of the caller's sandboxes: they outlive the sandbox they came from.
 *
 * @example
 * ```ts
 * for (const c of await Checkpoints.list()) console.log(c.id, c.name, c.storedBytes);
 * ```
 */
export const Checkpoints = {
  /**
   * Lists checkpoints, optionally of one sandbox.
   *
   * @example
   * ```ts
   * const mine = await Checkpoints.list({ sandboxId: sbx.id });
   * ```
   */
  async list(opts: DenClientOptions & RequestOptions & { sandboxId?: string } = {}): Promise<CheckpointInfo[]> {
    const client = new DenClient(opts);
    const query = opts.sandboxId ? `?sandbox_id=${seg(opts.sandboxId)}` : "";
    const r = await client.json({ method: "GET", path: `/v1/checkpoints${query}`, signal: opts.signal }, listOf("checkpoints", api.Checkpoint.parse));
    return r.map(toCheckpointInfo);
  },

  /**
   * Gets one checkpoint.
   *
   * @example
   * ```ts
   * const c = await Checkpoints.get("snap_...");
   * ```
   */
  async get(id: string, opts: DenClientOptions & RequestOptions = {}): Promise<CheckpointInfo> {
    const client = new DenClient(opts);
    return toCheckpointInfo(await client.json({ method: "GET", path: `/v1/checkpoints/${seg(id)}`, signal: opts.signal }, api.Checkpoint.parse));
  },

  /**
   * Deletes a checkpoint; sandboxes restored from it keep working.
   *
   * @example
   * ```ts
   * await Checkpoints.delete(c.id);
   * ```
   */
  async delete(id: string, opts: DenClientOptions & RequestOptions = {}): Promise<void> {
    const client = new DenClient(opts);
    await client.request({ method: "DELETE", path: `/v1/checkpoints/${seg(id)}`, signal: opts.signal });
  },
};
