import { PostgresAdapter, type Selectable } from "kysely";
import { DenError } from "@den/protocol";
import type { VolumeMountsTable, VolumesTable } from "./db.js";
import type { Store } from "./store.js";

export type VolumeRow = Selectable<VolumesTable>;
export type MountRow = Selectable<VolumeMountsTable>;

/** A mount a sandbox (or a helper VM) asks for: which volume, where, how. */
export interface Hold {
  volumeId: string;
  /** For messages: the name its owner knows it by. */
  name: string;
  path: string;
  readOnly: boolean;
}

/** States whose sandbox holds nothing any more (its VM is gone for good). */
const ENDED = ["destroyed", "error"];

const moving = (name: string) => new DenError("volume_in_use", `volume ${name} is moving between hosts; try again when it is done`, { volume: name });

/** Where a volume's image is: its host, or null while it is parked (only its stored copy is the volume). */
export const volumeHost = (v: Pick<VolumeRow, "host_id" | "snapshot_id">): string | null => (v.snapshot_id ? null : v.host_id);

/** Throws unless `v` may be mounted on `host` now: not moving, and its image there (it may have moved since the sandbox was placed). */
function checkOn(v: VolumeRow, name: string, host: string | undefined): void {
  if (v.state === "moving") throw moving(name);
  if (host !== undefined && volumeHost(v) !== host) {
    throw new DenError("volume_in_use", `volume ${name} moved to ${volumeHost(v) ? `host ${v.host_id}` : "the store"} while this sandbox was placed on ${host}; try again`, { volume: name });
  }
}

/**
 * The volumes' SQL: their rows and their mounts (in `s`'s transaction, when it is one).
 * The rule it keeps: a volume is held by one writer or by any number of readers, never
 * both, where a hold is a mount row with `held` of a sandbox that has not ended, or of a
 * helper VM (a sandbox id with no row). Every check and the write it guards run in the
 * caller's transaction, with the volume rows locked first on Postgres (SQLite runs one
 * write transaction at a time).
 */
export class VolumeStore {
  constructor(private readonly s: Store) {}

  private get db() {
    return this.s.db;
  }

  async insert(row: VolumeRow): Promise<void> {
    try {
      await this.db.insertInto("volumes").values(row).execute();
    } catch (e) {
      // The unique index on live (owner, name): another create of the same name won.
      if (/unique|duplicate/i.test((e as Error).message)) throw new DenError("already_exists", `a volume named ${row.name} already exists`);
      throw e;
    }
  }

  async byId(id: string): Promise<VolumeRow | undefined> {
    return this.db.selectFrom("volumes").selectAll().where("id", "=", id).executeTakeFirst();
  }

  /** An owner's live volume of that name (a deleted one is gone for them). */
  async byName(owner: string, name: string): Promise<VolumeRow | undefined> {
    return this.db.selectFrom("volumes").selectAll().where("owner", "=", owner).where("name", "=", name).where("deleted_at", "is", null).executeTakeFirst();
  }

  async list(owner: string): Promise<VolumeRow[]> {
    return this.db.selectFrom("volumes").selectAll().where("owner", "=", owner).where("deleted_at", "is", null).orderBy("name").execute();
  }

  /** How many live volumes an owner has, and their sizes summed (MiB). */
  async usage(owner: string): Promise<{ count: number; mb: number }> {
    const r = await this.db.selectFrom("volumes").select((eb) => [eb.fn.countAll<number>().as("n"), eb.fn.sum<number>("size_mb").as("mb")])
      .where("owner", "=", owner).where("deleted_at", "is", null).executeTakeFirstOrThrow();
    return { count: Number(r.n), mb: Number(r.mb ?? 0) };
  }

  async setReady(id: string): Promise<void> {
    await this.db.updateTable("volumes").set({ state: "ready" }).where("id", "=", id).where("deleted_at", "is", null).execute();
  }

  async setSize(id: string, sizeMb: number): Promise<void> {
    await this.db.updateTable("volumes").set({ size_mb: sizeMb }).where("id", "=", id).execute();
  }

  async markDeleted(id: string, at: number): Promise<void> {
    await this.db.updateTable("volumes").set({ deleted_at: at }).where("id", "=", id).where("deleted_at", "is", null).execute();
  }

  /** Deleted volumes whose images may still be on their hosts. */
  async deleted(): Promise<VolumeRow[]> {
    return this.db.selectFrom("volumes").selectAll().where("deleted_at", "is not", null).execute();
  }

  /** Creates that never finished (their process died): begun before `before`, still `creating`. */
  async unfinished(before: number): Promise<VolumeRow[]> {
    return this.db.selectFrom("volumes").selectAll().where("state", "=", "creating").where("deleted_at", "is", null).where("created_at", "<", before).execute();
  }

  /** The row of a deleted volume whose image is gone. */
  async forget(id: string): Promise<void> {
    await this.db.deleteFrom("volumes").where("id", "=", id).where("deleted_at", "is not", null).execute();
  }

  /** Locks volume rows until the transaction ends (Postgres; SQLite's one writer needs none), in id order so two lockers never deadlock. */
  async lock(ids: string[]): Promise<void> {
    if (!ids.length || !(this.db.getExecutor().adapter instanceof PostgresAdapter)) return;
    await this.db.selectFrom("volumes").select("id").where("id", "in", [...ids].sort()).orderBy("id").forUpdate().execute();
  }

  /**
   * Marks a ready volume `moving` (nothing may mount it until the move ends), if nothing
   * holds it but `except` (the sandbox it is moved for) or cold-hibernated sandboxes (their
   * VMs are gone; they find it where it went). In the caller's transaction.
   */
  async beginMove(id: string, except: string | undefined, patch: { snapshot_id: string; move_to: string | null; moved_at: number; move_owner: string }): Promise<VolumeRow> {
    await this.lock([id]);
    const v = await this.byId(id);
    if (!v || v.deleted_at !== null || v.state === "creating") throw new DenError("volume_not_found", `volume ${id} does not exist`);
    if (v.state === "moving") throw moving(v.name);
    const live = await this.liveHolds().select(["m.sandbox_id", "s.id as sandbox"])
      .where("m.volume_id", "=", id).where("m.sandbox_id", "!=", except ?? "")
      .executeTakeFirst();
    if (live) {
      throw new DenError("volume_in_use", `volume ${v.name} is on host ${v.host_id} and mounted there by ${live.sandbox ? `sandbox ${live.sandbox_id}` : "a transfer of its files or a grow"}: it cannot move to another host while mounted`, {
        volume: v.name, ...(live.sandbox ? { sandbox_id: live.sandbox_id } : {}),
      });
    }
    await this.db.updateTable("volumes").set({ state: "moving", ...patch }).where("id", "=", id).execute();
    return { ...v, state: "moving", ...patch };
  }

  /**
   * Holds that keep a volume where it is: of a sandbox that has not ended and is not cold
   * hibernated (that one's VM is gone: it finds the volume where it went), or of a helper VM.
   */
  private liveHolds() {
    return this.db.selectFrom("volume_mounts as m").leftJoin("sandboxes as s", "s.id", "m.sandbox_id").where("m.held", "=", 1)
      .where((eb) => eb.or([eb("s.id", "is", null), eb.and([eb("s.state", "not in", ENDED), eb.not(eb.and([eb("s.state", "=", "hibernated"), eb("s.hibernate_mode", "=", "cold")]))])]));
  }

  /**
   * The volumes' sweep saw these held now (and those never seen get a start to count from).
   * A row at a time, outside any transaction: it never holds one volume's lock while it
   * waits for another's, so it cannot deadlock with a mount that locks several.
   */
  async touchHeld(at: number): Promise<void> {
    const held = this.liveHolds().select("m.volume_id");
    const rows = await this.db.selectFrom("volumes").select("id").where("deleted_at", "is", null)
      .where((eb) => eb.or([eb("used_at", "is", null), eb("id", "in", held)])).orderBy("id").execute();
    for (const { id } of rows) await this.db.updateTable("volumes").set({ used_at: at }).where("id", "=", id).execute();
  }

  /** Volumes on a host that nothing has held since `before` and nothing holds now: to be parked in the store. */
  async idleSince(before: number): Promise<VolumeRow[]> {
    return this.db.selectFrom("volumes").selectAll().where("deleted_at", "is", null).where("state", "=", "ready").where("snapshot_id", "is", null)
      .where("used_at", "<", before).where((eb) => eb.not(eb("id", "in", this.liveHolds().select("m.volume_id")))).orderBy("used_at").execute();
  }

  /** A move's step: the row's place fields as given (`state` back to ready when the move is over). */
  async setPlace(id: string, patch: Partial<Pick<VolumeRow, "state" | "host_id" | "snapshot_id" | "move_to" | "moved_at">>): Promise<void> {
    await this.db.updateTable("volumes").set({ ...patch, ...(patch.state === "ready" ? { move_owner: null } : {}) }).where("id", "=", id).execute();
  }

  /**
   * Moves no live process runs: begun by `me` (or by a replica that did not say) before
   * `startedAt` (an earlier process of this replica), or by a replica not among `alive`.
   */
  async abandonedMoves(me: string, startedAt: number, alive: ReadonlySet<string>): Promise<VolumeRow[]> {
    const moving = await this.db.selectFrom("volumes").selectAll().where("state", "=", "moving").execute();
    return moving.filter((v) => (v.move_owner === null || v.move_owner === me ? (v.moved_at ?? 0) < startedAt : !alive.has(v.move_owner)));
  }

  /** Takes over an abandoned move (compare-and-set on its owner and start): whether this caller got it. */
  async claimMove(v: Pick<VolumeRow, "id" | "move_owner" | "moved_at">, me: string): Promise<boolean> {
    const r = await this.db.updateTable("volumes").set({ move_owner: me }).where("id", "=", v.id).where("state", "=", "moving")
      .where("move_owner", v.move_owner === null ? "is" : "=", v.move_owner).where("moved_at", v.moved_at === null ? "is" : "=", v.moved_at).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Volumes whose image is on `host`: not parked in the store, or moving away from it. */
  async onHost(host: string): Promise<VolumeRow[]> {
    return this.db.selectFrom("volumes").selectAll().where("host_id", "=", host).where("deleted_at", "is", null)
      .where((eb) => eb.or([eb.and([eb("state", "=", "ready"), eb("snapshot_id", "is", null)]), eb("state", "=", "moving")])).execute();
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
    await this.lock(holds.map((h) => h.volumeId));
    for (const h of holds) {
      const v = await this.byId(h.volumeId);
      if (!v || v.deleted_at !== null || v.state === "creating") throw new DenError("volume_not_found", `volume ${h.name} does not exist`);
      checkOn(v, h.name, host);
      await this.checkFree(h, sandboxId);
    }
    await this.db.insertInto("volume_mounts").values(holds.map((h) => ({
      volume_id: h.volumeId, sandbox_id: sandboxId, path: h.path, read_only: h.readOnly ? 1 : 0, held: 1, created_at: at,
    }))).execute();
    await this.used(holds.map((h) => h.volumeId), at);
  }

  private async used(ids: string[], at: number): Promise<void> {
    if (ids.length) await this.db.updateTable("volumes").set({ used_at: at }).where("id", "in", ids).execute();
  }

  /** A sandbox's mounts that let go of their volume (a cold hibernation's) hold it again: returns the volume ids taken. */
  async retake(sandboxId: string, at: number, host?: string): Promise<string[]> {
    const mounts = await this.mountsOf(sandboxId);
    await this.lock(mounts.map((m) => m.volume_id));
    // Every one of its volumes, held or not, must be where it is woken.
    for (const m of mounts) {
      const v = await this.byId(m.volume_id);
      if (v) checkOn(v, m.name, host);
    }
    const idle = mounts.filter((m) => m.held === 0);
    if (!idle.length) return [];
    for (const m of idle) await this.checkFree({ volumeId: m.volume_id, name: m.name, path: m.path, readOnly: m.read_only === 1 }, sandboxId);
    const ids = idle.map((m) => m.volume_id);
    await this.db.updateTable("volume_mounts").set({ held: 1 }).where("sandbox_id", "=", sandboxId).where("volume_id", "in", ids).execute();
    await this.used(ids, at);
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
