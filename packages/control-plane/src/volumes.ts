import { DenError, api, type HostAgent, type HostGuest, type VolumeSpec } from "@den/protocol";
import { newId } from "@den/protocol";
import type { Principal, Store } from "./db/store.js";
import { VolumeStore, volumeHost, type Hold, type VolumeRow } from "./db/volume-store.js";
import { VolumeMounts } from "./db/volume-mounts.js";
import { unanswered, type Ctx } from "./context.js";
import { OwnerSlots } from "./owner-slots.js";
import { VolumeMoves } from "./ops/volume-move.js";

/** Where a helper VM mounts the volume whose files it moves. */
const HELPER_MOUNT = "/mnt/volume";
/** The template helper VMs are made from (it has the volume slots every template is baked with). */
const HELPER_TEMPLATE = "base";

export const volumeStore = (s: Store): VolumeStore => new VolumeStore(s);
export const volumeMounts = (s: Store): VolumeMounts => new VolumeMounts(s);

/** The volumes of a create, restore or fork, resolved against the owner's: what to hold, where they are. */
export interface ResolvedMounts {
  holds: Hold[];
  /** The host their images are on (a sandbox mounting them runs there, or they are moved to where it runs); null: none, or all parked in the store. */
  host: string | null;
}

/** Mount requests by name -> the owner's volumes (404 for a name they have none of, as for another owner's). */
export async function resolveMounts(ctx: Ctx, owner: string, mounts: api.VolumeMount[] | undefined): Promise<ResolvedMounts> {
  if (!mounts?.length) return { holds: [], host: null };
  const vs = volumeStore(ctx.store);
  const holds: Hold[] = [];
  const hosts = new Set<string>();
  for (const m of mounts) {
    const v = await vs.byName(owner, m.name);
    if (!v || v.state === "creating") throw new DenError("volume_not_found", `volume ${JSON.stringify(m.name)} does not exist`);
    holds.push({ volumeId: v.id, name: v.name, path: m.path, readOnly: m.read_only ?? false });
    const at = volumeHost(v);
    if (at) hosts.add(at);
  }
  // One host's images at a time: a sandbox runs where they are (those parked in the store are fetched there).
  if (hosts.size > 1) throw new DenError("invalid_argument", "these volumes are on different hosts; a sandbox mounts volumes of one host (or parked in the store) only");
  return { holds, host: [...hosts][0] ?? null };
}

/** The host that has the images of these volumes (the first one's not parked in the store); null if all are parked. */
async function imagesHost(store: Store, volumeIds: readonly string[]): Promise<string | null> {
  for (const id of volumeIds) {
    const v = await volumeStore(store).byId(id);
    const at = v ? volumeHost(v) : null;
    if (at) return at;
  }
  return null;
}

/**
 * The host for a sandbox that mounts volumes: where their images are, if it can take it;
 * else (their host is draining, down or full, or they are parked in the store) wherever
 * `place` finds room, the volumes brought there first. `except`: the sandbox whose own
 * holds do not stop a move (a wake's).
 */
export async function placeWithVolumes(ctx: Ctx, volumeIds: readonly string[], place: (only: string | null, exclude?: string) => Promise<HostAgent>, except?: string): Promise<HostAgent> {
  if (!volumeIds.length) return place(null);
  // A volume being moved (an idle one parked, say) lands first: where it lands decides the host.
  const moves = new VolumeMoves(ctx);
  await moves.settled(volumeIds);
  const host = await imagesHost(ctx.store, volumeIds);
  if (host) {
    try {
      return await place(host);
    } catch (e) {
      if (!(e instanceof DenError && e.code === "capacity_exhausted")) throw e;
    }
  }
  const to = await place(null, host ?? undefined);
  await moves.bring(volumeIds, to, except);
  return to;
}

/** What a host is asked to mount. */
export const specsOf = (holds: readonly Pick<Hold, "volumeId" | "path" | "readOnly">[]): VolumeSpec[] => holds.map((h) => ({ volume: h.volumeId, path: h.path, readOnly: h.readOnly }));


/** A guest's error about a path under the helper's mount, told as a path of the volume. */
function asVolumePath(e: unknown): unknown {
  if (!(e instanceof DenError) || !e.message.includes(HELPER_MOUNT)) return e;
  return new DenError(e.code, e.message.split(`${HELPER_MOUNT}/`).join("/").split(HELPER_MOUNT).join("/"), e.details);
}

/** A helper VM with one volume mounted, for one file transfer or grow; `close()` destroys it and lets go of its hold. */
interface Helper {
  guest: HostGuest;
  /** The volume's root in the helper's guest. */
  root: string;
  close(): Promise<void>;
}

/**
 * Named volumes of an owner: create, list, get, delete, grow, and their files without a
 * sandbox. A volume's row is written before its image is made and marked deleted before
 * its image is removed, so a crash leaves a row the sweep finishes, never an image no row
 * knows. What a guest wrote is never parsed on the host: file transfers and grows run in a
 * short-lived helper VM that mounts the volume, holding it as any mount does.
 */
export class Volumes {
  /** Helper VMs at once per owner (each takes a VM's memory on the volume's host). */
  private readonly transfers: OwnerSlots;

  constructor(private readonly ctx: Ctx) {
    this.transfers = new OwnerSlots(ctx.config.limits.volumeTransfersPerOwner, "volume file transfers and grows", "DEN_MAX_VOLUME_TRANSFERS_PER_OWNER");
  }

  private get vs(): VolumeStore {
    return volumeStore(this.ctx.store);
  }

  private get mounts(): VolumeMounts {
    return volumeMounts(this.ctx.store);
  }

  /** The caller's volume, or 404 (another owner's volume does not exist for them). */
  /** A volume by id, whoever owns it (E2B's volume tokens name their owner; they are checked by the caller). */
  async byId(id: string): Promise<VolumeRow | undefined> {
    return api.VolumeId.safeParse(id).success ? this.vs.byId(id) : undefined;
  }

  async owned(p: Principal, name: string): Promise<VolumeRow> {
    const v = api.VolumeName.safeParse(name).success ? await this.vs.byName(p.owner, name) : undefined;
    if (!v || v.state === "creating") throw new DenError("volume_not_found", `volume ${JSON.stringify(name)} does not exist`);
    return v;
  }

  /** The caller's volume by id (what E2B's API names volumes by), or 404 as for `owned`. */
  async ownedById(p: Principal, id: string): Promise<VolumeRow> {
    const v = api.VolumeId.safeParse(id).success ? await this.vs.byId(id) : undefined;
    if (!v || v.owner !== p.owner || v.deleted_at !== null || v.state === "creating") throw new DenError("volume_not_found", `volume ${JSON.stringify(id.slice(0, 64))} does not exist`);
    return v;
  }

  async toApi(rows: VolumeRow[]): Promise<api.Volume[]> {
    const mounts = await this.mounts.mountsOfVolumes(rows.map((r) => r.id));
    return rows.map((r) => ({
      id: r.id, name: r.name, size_mb: r.size_mb, created_at: new Date(r.created_at).toISOString(),
      mounts: mounts.filter((m) => m.volume_id === r.id).map((m) => ({ sandbox_id: m.sandbox_id, path: m.path, read_only: m.read_only === 1, held: m.held === 1 })),
    }));
  }

  async list(p: Principal): Promise<api.Volume[]> {
    return this.toApi((await this.vs.list(p.owner)).filter((v) => v.state !== "creating"));
  }

  async get(p: Principal, name: string): Promise<api.Volume> {
    return (await this.toApi([await this.owned(p, name)]))[0]!;
  }

  /** The host a new volume's image goes on: the first one that takes new sandboxes. */
  private async placeVolume(): Promise<HostAgent> {
    const { hosts } = this.ctx;
    const pick = () => hosts.all.find((h) => hosts.takesNew(h)) ?? hosts.all[0];
    // None yet: a replica just started may not have connected to its registered hosts (over TLS, a
    // connect and an identity check), or a host registered through another replica a moment ago.
    let host = pick();
    if (!host) {
      await hosts.refresh();
      host = pick();
    }
    if (!host) throw new DenError("capacity_exhausted", "no host agent can take a volume now (none is up)");
    return host;
  }

  /** The host a helper VM for `v` runs on: its image's, or (parked, or its host is gone) a host it is brought to first. */
  private hostFor(v: VolumeRow): Promise<HostAgent> {
    return placeWithVolumes(this.ctx, [v.id], async (only) => {
      if (!only) return await this.placeVolume();
      if (!this.ctx.hosts.has(only)) throw new DenError("capacity_exhausted", `host ${only} is not up`);
      return this.ctx.hosts.get(only);
    });
  }

  /** Refuses what would take the owner past their volume count or size quota (in the caller's transaction, the owner locked). */
  private async quota(tx: Store, owner: string, addCount: number, addMb: number): Promise<void> {
    await tx.sandboxes.lockOwner(owner);
    const { count, mb } = await volumeStore(tx).usage(owner);
    const l = this.ctx.config.limits;
    if (count + addCount > l.volumesPerOwner) throw new DenError("quota_exceeded", `owner ${owner} may have at most ${l.volumesPerOwner} volumes; delete some first`, { volumes: count, quota_volumes: l.volumesPerOwner });
    if (mb + addMb > l.volumeMbPerOwner) {
      throw new DenError("quota_exceeded", `owner ${owner} has ${mb} MiB of volumes; ${addMb} more would pass the quota of ${l.volumeMbPerOwner} MiB`, { volume_mb: mb, adding_mb: addMb, quota_mb: l.volumeMbPerOwner });
    }
  }

  async create(p: Principal, req: api.CreateVolumeRequest): Promise<api.Volume> {
    const { store, clock } = this.ctx;
    const host = await this.placeVolume();
    const row: VolumeRow = { id: newId("vol"), owner: p.owner, name: req.name, size_mb: req.size_mb, state: "creating", host_id: host.instance, created_at: clock.now(), deleted_at: null, snapshot_id: null, move_to: null, moved_at: null, move_owner: null, used_at: clock.now() };
    // The name and the quota are taken with the row, before the image is made.
    await store.transaction(async (tx) => {
      await this.quota(tx, p.owner, 1, req.size_mb);
      if (await volumeStore(tx).byName(p.owner, req.name)) throw new DenError("already_exists", `a volume named ${req.name} already exists`);
      await volumeStore(tx).insert(row);
    });
    try {
      await host.volumes.create(newId("op"), row.id, row.size_mb);
    } catch (e) {
      await this.vs.markDeleted(row.id, clock.now());
      await this.purge(row);
      throw e;
    }
    await this.vs.setReady(row.id);
    return (await this.toApi([{ ...row, state: "ready" }]))[0]!;
  }

  /** Deletes a volume nothing mounts (a mount in any sandbox not destroyed, hibernated ones too, is a 409): its row first, then its image. */
  async delete(p: Principal, name: string): Promise<void> {
    const v = await this.owned(p, name);
    await this.ctx.store.transaction(async (tx) => {
      const vs = volumeStore(tx);
      await vs.lock([v.id]);
      const cur = await vs.byId(v.id);
      if (cur?.state === "moving") throw new DenError("volume_in_use", `volume ${v.name} is moving between hosts; delete it when that is done`, { volume: v.name });
      const m = await volumeMounts(tx).inUse(v.id);
      if (m) {
        const by = (await tx.sandboxes.get(m.sandbox_id)) ? `sandbox ${m.sandbox_id}` : "a transfer of its files or a grow";
        throw new DenError("volume_in_use", `volume ${v.name} is mounted by ${by}; destroy it (or wait for it) first`, { volume: v.name, ...(by.startsWith("sandbox") ? { sandbox_id: m.sandbox_id } : {}) });
      }
      await vs.markDeleted(v.id, this.ctx.clock.now());
    });
    await this.purge(v);
  }

  /** Removes a deleted volume's image (and lets go of its stored copy), then its row; a failure leaves both for the next sweep. */
  private async purge(v: VolumeRow): Promise<void> {
    try {
      if (v.snapshot_id) await this.ctx.store.snapshots.release(v.snapshot_id, this.ctx.clock.now());
      // A parked volume's old host may be gone for good: its image went when it was parked.
      if (!v.snapshot_id || this.ctx.hosts.has(v.host_id)) await this.ctx.hosts.get(v.host_id).volumes.delete(v.id);
      await this.vs.forget(v.id);
    } catch (err) {
      this.ctx.log.warn({ err, volume: v.id }, `volume ${v.id}: its image could not be removed yet (retried by the next sweep)`);
    }
  }

  /**
   * After a (re)start's reconcile, and now and then: creates a dead process left unfinished
   * are given up, deleted volumes' images removed, and holds of helper VMs begun before
   * `startedAt` dropped (the reconcile destroyed their VMs: no row knows them).
   */
  async sweep(startedAt?: number): Promise<void> {
    const vs = this.vs;
    if (startedAt !== undefined) {
      for (const v of await vs.unfinished(startedAt)) await vs.markDeleted(v.id, this.ctx.clock.now());
      await this.mounts.dropHelpers(startedAt);
      await new VolumeMoves(this.ctx).recover(startedAt);
    }
    for (const v of await vs.deleted()) if (v.snapshot_id || this.ctx.hosts.has(v.host_id)) await this.purge(v);
    await this.dropStrayImages();
    if (this.ctx.config.volumes.parkIdleMs > 0) await new VolumeMoves(this.ctx).parkIdle(this.ctx.config.volumes.parkIdleMs);
  }

  /**
   * Images a host holds of volumes whose rows do not put them there: a move away from a host
   * that did not answer when its image was to go (or a kill -9 just before), which would stay
   * forever. Rows are read after the host's listing (a volume's row is written before its
   * image is made), and the host removes an image only if it is still the file it listed
   * (a fetch to it since would have made a new one).
   */
  private async dropStrayImages(): Promise<void> {
    for (const listed of await this.ctx.hosts.each((h) => h.volumes.images())) {
      if (!listed.ok) continue; // (a host that does not answer is asked again next time)
      const host = listed.host;
      for (const image of listed.value) {
        const v = await this.vs.byId(image.id);
        // Deleted ones are purge's; one being made or moving may be wanted here.
        if (v && (v.deleted_at !== null || v.state !== "ready" || volumeHost(v) === host.instance)) continue;
        try {
          if (await host.volumes.dropImage(image.id, image.inode)) {
            this.ctx.log.info({ volume: image.id, host: host.instance }, `volume ${image.id}: removed the image host ${host.instance} still had (the volume is ${v ? (volumeHost(v) ? `on host ${v.host_id}` : "in the store") : "gone"})`);
          }
        } catch (err) {
          this.ctx.log.warn({ err, volume: image.id, host: host.instance }, `volume ${image.id}: the image host ${host.instance} still has could not be removed yet`);
        }
      }
    }
  }

  /** Moves of replicas that are gone (their leases ran out), and of this replica's earlier process, end where they stood. */
  async settleAbandonedMoves(startedAt: number): Promise<void> {
    await new VolumeMoves(this.ctx).recover(startedAt);
  }

  /**
   * A helper VM on the volume's host mounting it (read-only for a read), held as any mount:
   * a write waits for no one else to hold it, a read for no writer.
   */
  private async helper(p: Principal, v: VolumeRow, readOnly: boolean): Promise<Helper> {
    const release = this.transfers.take(p.owner);
    const id = newId("sbx");
    const hold: Hold = { volumeId: v.id, name: v.name, path: HELPER_MOUNT, readOnly };
    let host: HostAgent;
    try {
      // A parked volume (or one on a host that is gone) is brought to a host that takes sandboxes first.
      host = await this.hostFor(v);
      await this.ctx.store.transaction((tx) => volumeMounts(tx).take(id, [hold], this.ctx.clock.now(), host.instance));
    } catch (e) {
      release();
      throw e;
    }
    let closing: Promise<void> | undefined;
    const close = () => (closing ??= (async () => {
      try {
        await host.vms.destroy(id);
        // Only once its VM is gone does the helper let go (a destroy that failed leaves the
        // hold, and the VM, to the next start's reconcile and sweep).
        await this.mounts.drop(id);
      } catch (err) {
        this.ctx.log.warn({ err, volume: v.id }, `volume ${v.id}: helper VM ${id} could not be removed; the volume stays held until the next start`);
      } finally {
        release();
      }
    })());
    try {
      await host.vms.create(newId("op"), { id, template: HELPER_TEMPLATE, volumes: specsOf([hold]) });
    } catch (e) {
      if (unanswered(e)) {
        // The host may still be making it: the hold stays until the next start's sweep.
        release();
        this.ctx.log.warn({ volume: v.id }, `volume ${v.id}: helper VM ${id} unanswered; the volume stays held until the next start`);
      } else await close();
      throw e;
    }
    return { guest: host.guest(id), root: HELPER_MOUNT, close };
  }

  /**
   * Runs `fn` with the volume mounted in a helper VM (read-only for `readOnly`), the VM gone
   * before this returns; `root` is the volume's root in the helper's guest. Guest errors
   * name paths of the volume, not of the helper.
   */
  async withHelper<T>(p: Principal, v: VolumeRow, readOnly: boolean, fn: (guest: HostGuest, root: string) => Promise<T>): Promise<T> {
    const h = await this.helper(p, v, readOnly);
    try {
      return await fn(h.guest, h.root);
    } catch (e) {
      throw asVolumePath(e);
    } finally {
      await h.close();
    }
  }

  /** Writes a file into a volume (atomically, parents made), in a helper VM; returns its stat. */
  async writeFile(p: Principal, name: string, path: string, source: AsyncIterable<Buffer>): Promise<api.FileStat> {
    return this.withHelper(p, await this.owned(p, name), false, async (guest, root) => {
      const at = root + path;
      await guest.files.write(at, source, { parents: true });
      const s = await guest.files.stat(at);
      return { path, type: s.type, size: s.size, mode: s.mode, mtime: new Date(s.mtime_ms).toISOString() };
    });
  }

  /**
   * A file of a volume as a stream, from a helper VM that lives until the stream ends or
   * `close` is called (the caller calls it when its response closes, read to the end or not).
   * The first chunk is read here, so a missing file is an error before any byte is sent.
   */
  async readFile(p: Principal, name: string, path: string): Promise<{ body: AsyncGenerator<Buffer>; close: () => Promise<void> }> {
    return this.readFileOf(p, await this.owned(p, name), path);
  }

  /** `readFile` of a volume row the caller already looked up (E2B's content API finds it by id). */
  async readFileOf(p: Principal, v: VolumeRow, path: string): Promise<{ body: AsyncGenerator<Buffer>; close: () => Promise<void> }> {
    const h = await this.helper(p, v, true);
    try {
      const it = h.guest.files.readStream(h.root + path);
      const first = await it.next();
      async function* body(): AsyncGenerator<Buffer> {
        try {
          if (!first.done) yield first.value;
          yield* it;
        } finally {
          await h.close();
        }
      }
      return { body: body(), close: h.close };
    } catch (e) {
      await h.close();
      throw asVolumePath(e);
    }
  }

  /** Grows a volume's filesystem (never shrinks), in a helper VM holding it read-write; the size counts against the quota. */
  async grow(p: Principal, name: string, sizeMb: number): Promise<api.Volume> {
    const { store, clock } = this.ctx;
    const v = await this.owned(p, name);
    if (sizeMb <= v.size_mb) throw new DenError("invalid_argument", `volume ${v.name} is ${v.size_mb} MiB; a grow asks for more (volumes never shrink)`);
    const release = this.transfers.take(p.owner);
    const helper = newId("sbx");
    try {
      const host = await this.hostFor(v);
      await store.transaction(async (tx) => {
        // The volume's row before the owner's lock, as every mount takes them.
        await volumeMounts(tx).take(helper, [{ volumeId: v.id, name: v.name, path: "/mnt/den-volume", readOnly: false }], clock.now(), host.instance);
        await this.quota(tx, p.owner, 0, sizeMb - v.size_mb);
      });
      let answered = true;
      try {
        await host.volumes.grow(newId("op"), v.id, sizeMb, helper);
        await this.vs.setSize(v.id, sizeMb);
      } catch (e) {
        answered = !unanswered(e);
        throw e;
      } finally {
        // (A host that did not answer may still be growing it in its helper: held until the next start.)
        if (answered) await this.mounts.drop(helper);
      }
      return this.get(p, name);
    } finally {
      release();
    }
  }
}
