import { PostgresAdapter, type Selectable } from "kysely";
import { DenError } from "@den/protocol";
import type { VolumesTable } from "./db.js";
import type { Store } from "./store.js";

export type VolumeRow = Selectable<VolumesTable>;

/** A mount a sandbox (or a helper VM) asks for: which volume, where, how. */
export interface Hold {
  volumeId: string;
  /** For messages: the name its owner knows it by. */
  name: string;
  path: string;
  readOnly: boolean;
}

/** States whose sandbox holds nothing any more (its VM is gone for good). */
export const ENDED = ["destroyed", "error"];

const moving = (name: string) => new DenError("volume_in_use", `volume ${name} is moving between hosts; try again when it is done`, { volume: name });

/** Where a volume's image is: its host, or null while it is parked (only its stored copy is the volume). */
export const volumeHost = (v: Pick<VolumeRow, "host_id" | "snapshot_id">): string | null => (v.snapshot_id ? null : v.host_id);

/** Throws unless `v` may be mounted on `host` now: not moving, and its image there (it may have moved since the sandbox was placed). */
export function checkOn(v: VolumeRow, name: string, host: string | undefined): void {
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

  /** Marks volumes used at `at` (the idle park counts from it). */
  async markUsed(ids: string[], at: number): Promise<void> {
    if (ids.length) await this.db.updateTable("volumes").set({ used_at: at }).where("id", "in", ids).execute();
  }
}
