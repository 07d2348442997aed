import type { Principal, SandboxRow, Store } from "./db/store.js";
import type { SandboxesRepo } from "./db/sandboxes.js";
import type { MountRow } from "./db/volume-mounts.js";
import { volumeMounts } from "./volumes.js";

/** The sandboxes' rows as the surfaces read them (E2B's list and metrics, envd's signature search), without a repository in hand. */
export class SandboxReads {
  constructor(private readonly store: Store) {}

  /** An owner's sandboxes in E2B's order (by creation, then id), paged by a cursor. */
  listNewest(owner: string, q: Parameters<SandboxesRepo["listNewest"]>[1]): Promise<SandboxRow[]> {
    return this.store.sandboxes.listNewest(owner, q);
  }

  /** Those of `ids` that are the caller's. */
  async ownedOf(p: Principal, ids: string[]): Promise<SandboxRow[]> {
    return (await this.store.sandboxes.byIds(ids)).filter((r) => r.owner === p.owner);
  }

  /** Every sandbox that has not ended. */
  live(): Promise<SandboxRow[]> {
    return this.store.sandboxes.live();
  }

  liveIds(): Promise<string[]> {
    return this.store.sandboxes.liveIds();
  }

  /** A sandbox's mounts, with their volumes' names. */
  mountsOf(id: string): Promise<Array<MountRow & { name: string }>> {
    return volumeMounts(this.store).mountsOf(id);
  }
}
