import type { api } from "@den/protocol";
import type { Principal, SandboxRow } from "./db/store.js";
import type { Ctx } from "./context.js";
import type { Lifecycle } from "./lifecycle.js";
import * as forkOp from "./ops/fork.js";
import type { Serializer } from "./serializer.js";
import { resolveMounts } from "./volumes.js";

/**
 * Forks: a running sandbox into children with its exact state (see ops/fork.ts). On its
 * host they share its memory and disk copy-on-write; when its host has no room, through the
 * store onto others.
 */
export class Forks {
  constructor(private readonly ctx: Ctx, private readonly queue: Serializer, private readonly lifecycle: Lifecycle) {}

  /**
   * Forks a running sandbox into `count` children with its exact state. Each child has the
   * parent's TTL counted from its own creation (or `ttlSeconds`), and the parent's metadata
   * plus `forked_from`.
   */
  async fork(p: Principal, id: string, count: number, ttlSeconds?: number, volumes?: api.VolumeMount[]): Promise<SandboxRow[]> {
    await this.lifecycle.quota(p, count);
    // What each child mounts (the parent's mounts are not carried over); a writer's hold goes to one child at most.
    const vols = await resolveMounts(this.ctx, p.owner, volumes);
    return this.queue.run(id, () => forkOp.run({ ctx: this.ctx }, p, id, count, vols, ttlSeconds));
  }
}
