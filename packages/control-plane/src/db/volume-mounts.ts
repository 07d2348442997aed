import type { Selectable } from "kysely";
import { DenError } from "@den/protocol";
import type { VolumeMountsTable } from "./db.js";
import type { Store } from "./store.js";
import { ENDED, VolumeStore, checkOn, type Hold } from "./volume-store.js";

export type MountRow = Selectable<VolumeMountsTable>;

/**
 * Volumes' mounts and the holds they make (in `s`'s transaction, when it is one): a volume
 * is held by one writer or by any number of readers, never both. Every check and the write
 * it guards run in the caller's transaction, the volume rows locked first (VolumeStore.lock).
 */
export class VolumeMounts {
  private readonly volumes: VolumeStore;

  constructor(private readonly s: Store) {
    this.volumes = new VolumeStore(s);
  }

  private get db() {
    return this.s.db;
  }

  /** Holds of a volume that count against a new one by `except`: held, of sandboxes that have not ended or of helpers. */
  private async holders(volumeId: string, except: string): Promise<Array<{ sandbox_id: string; read_only: number; sandbox: string | null }>> {
    return this.db.selectFrom("volume_mounts as m").leftJoin("sandboxes as s", "s.id", "m.sandbox_id")
      .select(["m.sandbox_id", "m.read_only", "s.id as sandbox"])
      .where("m.volume_id", "=", volumeId).where("m.held", "=", 1).where("m.sandbox_id", "!=", except)
      .where((eb) => eb.or([eb("s.id", "is", null), eb("s.state", "not in", ENDED)]))
      .execute();
  }

  /** Throws `volume_in_use` unless `h` may be held by `sandboxId` now: no other holder for a writer, no other writer for a reader. */
  private async checkFree(h: Hold, sandboxId: string): Promise<void> {
    const others = await this.holders(h.volumeId, sandboxId);
    const blocking = others.find((o) => !h.readOnly || o.read_only === 0);
    if (!blocking) return;
    const by = blocking.sandbox ? `sandbox ${blocking.sandbox_id}` : "a transfer of its files or a grow";
    throw new DenError("volume_in_use", `volume ${h.name} is mounted ${blocking.read_only ? "read-only" : "read-write"} by ${by}: ${h.readOnly ? "a read-only mount waits for its writer to let go" : "a read-write mount needs it held by no one else"}`, {
      volume: h.name, ...(blocking.sandbox ? { sandbox_id: blocking.sandbox_id } : {}),
    });
  }

  /**
   * Takes `holds` for `sandboxId` (in the caller's transaction, with the sandbox's own row
   * or before a helper's VM exists): each volume must be live and ready and free for it, and
   * (with `host`) have its image on that host, where the sandbox was placed.
   */
  async take(sandboxId: string, holds: Hold[], at: number, host?: string): Promise<void> {
    if (!holds.length) return;
    await this.volumes.lock(holds.map((h) => h.volumeId));
    for (const h of holds) {
      const v = await this.volumes.byId(h.volumeId);
      if (!v || v.deleted_at !== null || v.state === "creating") throw new DenError("volume_not_found", `volume ${h.name} does not exist`);
      checkOn(v, h.name, host);
      await this.checkFree(h, sandboxId);
    }
    await this.db.insertInto("volume_mounts").values(holds.map((h) => ({
      volume_id: h.volumeId, sandbox_id: sandboxId, path: h.path, read_only: h.readOnly ? 1 : 0, held: 1, created_at: at,
    }))).execute();
    await this.volumes.markUsed(holds.map((h) => h.volumeId), at);
  }

  /** A sandbox's mounts that let go of their volume (a cold hibernation's) hold it again: returns the volume ids taken. */
  async retake(sandboxId: string, at: number, host?: string): Promise<string[]> {
    const mounts = await this.mountsOf(sandboxId);
    await this.volumes.lock(mounts.map((m) => m.volume_id));
    // Every one of its volumes, held or not, must be where it is woken.
    for (const m of mounts) {
      const v = await this.volumes.byId(m.volume_id);
      if (v) checkOn(v, m.name, host);
    }
    const idle = mounts.filter((m) => m.held === 0);
    if (!idle.length) return [];
    for (const m of idle) await this.checkFree({ volumeId: m.volume_id, name: m.name, path: m.path, readOnly: m.read_only === 1 }, sandboxId);
    const ids = idle.map((m) => m.volume_id);
    await this.db.updateTable("volume_mounts").set({ held: 1 }).where("sandbox_id", "=", sandboxId).where("volume_id", "in", ids).execute();
    await this.volumes.markUsed(ids, at);
    return ids;
  }

  /** A sandbox lets go of its volumes but those in `keep` (their mounts stay, for its wake). */
  async release(sandboxId: string, keep: readonly string[] = []): Promise<void> {
    let q = this.db.updateTable("volume_mounts").set({ held: 0 }).where("sandbox_id", "=", sandboxId);
    if (keep.length) q = q.where("volume_id", "not in", [...keep]);
    await q.execute();
  }

  /** Lets go of the holds on `volumeIds` only (a wake that failed gives back what it took). */
  async releaseSome(sandboxId: string, volumeIds: readonly string[]): Promise<void> {
    if (!volumeIds.length) return;
    await this.db.updateTable("volume_mounts").set({ held: 0 }).where("sandbox_id", "=", sandboxId).where("volume_id", "in", [...volumeIds]).execute();
  }

  /** A sandbox (or helper) is gone: its mounts go with it. */
  async drop(sandboxId: string): Promise<void> {
    await this.db.deleteFrom("volume_mounts").where("sandbox_id", "=", sandboxId).execute();
  }

  /** Holds of helper VMs (no sandbox row) begun before `before`: their VMs are gone after a restart's reconcile. */
  async dropHelpers(before: number): Promise<void> {
    await this.db.deleteFrom("volume_mounts").where("created_at", "<", before)
      .where((eb) => eb.not(eb.exists(eb.selectFrom("sandboxes").select("sandboxes.id").whereRef("sandboxes.id", "=", "volume_mounts.sandbox_id")))).execute();
  }

  /** A sandbox's mounts, with their volumes' names. */
  async mountsOf(sandboxId: string): Promise<Array<MountRow & { name: string }>> {
    return this.db.selectFrom("volume_mounts as m").innerJoin("volumes as v", "v.id", "m.volume_id").selectAll("m").select("v.name")
      .where("m.sandbox_id", "=", sandboxId).orderBy("m.created_at").orderBy("m.volume_id").execute();
  }

  /** Mounts of these volumes in sandboxes that have not ended (what the API shows; helpers' are internal). */
  async mountsOfVolumes(volumeIds: string[]): Promise<MountRow[]> {
    if (!volumeIds.length) return [];
    return this.db.selectFrom("volume_mounts as m").innerJoin("sandboxes as s", "s.id", "m.sandbox_id").selectAll("m")
      .where("m.volume_id", "in", volumeIds).where("s.state", "not in", ENDED).orderBy("m.created_at").execute();
  }

  /** Whether anything still mounts a volume: a sandbox that has not ended (held or not), or a helper. */
  async inUse(volumeId: string): Promise<MountRow | undefined> {
    return this.db.selectFrom("volume_mounts as m").leftJoin("sandboxes as s", "s.id", "m.sandbox_id").selectAll("m")
      .where("m.volume_id", "=", volumeId).where((eb) => eb.or([eb("s.id", "is", null), eb("s.state", "not in", ENDED)])).executeTakeFirst();
  }
}
