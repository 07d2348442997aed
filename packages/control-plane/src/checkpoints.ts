import { DenError, api } from "@den/protocol";
import type { CheckpointRow, Principal } from "./db/store.js";
import type { Ctx } from "./context.js";
import type { Lifecycle } from "./lifecycle.js";
import * as checkpointOp from "./ops/checkpoint.js";
import * as checkpointDeleteOp from "./ops/checkpoint-delete.js";
import type { Serializer } from "./serializer.js";

/** Durable checkpoints: taken into the store (cataloged first), listed, deleted (the garbage collector frees them). */
export class Checkpoints {
  constructor(private readonly ctx: Ctx, private readonly queue: Serializer, private readonly lifecycle: Lifecycle) {}

  /** A durable checkpoint of a running sandbox (the caller wakes a hibernated one first; see ops/checkpoint.ts). */
  async take(p: Principal, id: string, name: string | undefined): Promise<CheckpointRow> {
    return this.queue.run(id, () => checkpointOp.run({ ctx: this.ctx, lifecycle: this.lifecycle }, p, id, name));
  }

  async owned(p: Principal, id: string): Promise<CheckpointRow> {
    const row = api.CheckpointId.safeParse(id).success ? await this.ctx.store.checkpoints.get(id) : undefined;
    if (!row || row.owner !== p.owner) throw new DenError("snapshot_not_found", `checkpoint ${JSON.stringify(id)} does not exist`);
    return row;
  }

  /**
   * Deletes a checkpoint: its row goes and its stored copy is released in one
   * transaction; the garbage collector deletes the objects after the grace period, so a
   * restore reading it right now still finishes. Sandboxes restored from it keep their own
   * copy of its disk.
   */
  async delete(p: Principal, id: string): Promise<void> {
    await checkpointDeleteOp.run({ ctx: this.ctx }, await this.owned(p, id));
  }
}
