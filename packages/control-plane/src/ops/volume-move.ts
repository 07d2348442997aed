import { DenError, type HostAgent, type StoredRef } from "@den/protocol";
import { setTimeout as sleep } from "node:timers/promises";
import { newId } from "@den/protocol";
import { faultPoint, snapshotKey } from "@den/store";
import type { StoredSnapshotRow } from "../db/store.js";
import { VolumeStore, volumeHost, type VolumeRow } from "../db/volume-store.js";
import { refOf, unanswered, type Ctx } from "../context.js";

/** How long a mount waits for a volume's move to end, and how often it looks. */
const SETTLE_MS = 120_000;
const SETTLE_POLL_MS = 200;

/**
 * Volumes moving between hosts through the snapshot store. A volume's image lives on one
 * host; to be mounted on another it is uploaded (a stored snapshot of kind `volume`,
 * catalogued before its upload starts), then downloaded there. Each step commits before the
 * next one begins and before anything is removed: the host's image goes only once the row
 * names the stored copy, the stored copy only once the row names the new host's image. A
 * drained host's volumes are parked (uploaded, nothing downloaded) so they outlive it, and
 * so are volumes idle for `DEN_VOLUME_PARK_IDLE_SECONDS`. While a move runs the volume is
 * `moving` and nothing may mount it (a mount waits for it to land); a restart finishes or
 * undoes moves of a process that died (`recover`, a move's crash path).
 *
 * Unlike the other operations (ops/<kind>.ts), a move has no operations row: it belongs to
 * a volume, not to a sandbox or a template, and the volume's own row is its journal. Its
 * `moving` state, with `snapshot_id`, `move_to`, `moved_at` and `move_owner`, is the intent
 * (written with the stored copy's catalog row before any host is asked), each step commits
 * in that row, and a move is claimed and settled through it (`recover`) as a pending
 * operation is through its row. Recovery's `sandboxOps`/`detachedOps` do not list it.
 */
export class VolumeMoves {
  constructor(private readonly ctx: Ctx) {}

  private get vs(): VolumeStore {
    return new VolumeStore(this.ctx.store);
  }

  /**
   * Brings these volumes to `to` (from the store, or from the host that has them) before a
   * sandbox there takes them; `except` is that sandbox (its own holds do not stop a move).
   */
  async bring(volumeIds: readonly string[], to: HostAgent, except?: string): Promise<void> {
    await this.settled(volumeIds);
    for (const id of volumeIds) {
      const v = await this.vs.byId(id);
      if (!v || v.deleted_at !== null) throw new DenError("volume_not_found", `volume ${id} does not exist`);
      if (v.state === "ready" && volumeHost(v) === to.instance) continue;
      await this.move(v, to, except);
    }
  }

  /**
   * Waits (up to `SETTLE_MS`) while any of these volumes is moving, so a mount that comes
   * during a move (an idle volume's park, a drain's) goes where it lands rather than failing;
   * past that, the mount's own check answers 409 `volume_in_use`.
   */
  async settled(volumeIds: readonly string[]): Promise<void> {
    const until = Date.now() + SETTLE_MS;
    for (const id of volumeIds) {
      while ((await this.vs.byId(id))?.state === "moving" && Date.now() < until) await sleep(SETTLE_POLL_MS);
    }
  }

  /**
   * Parks volumes nothing has held for `idleMs` (their hosts up), so a host lost for good
   * takes only the volumes in use on it. Each is checked again as its move begins: one taken
   * meanwhile stays. A volume the pass cannot park is tried again by the next.
   */
  async parkIdle(idleMs: number): Promise<void> {
    const now = this.ctx.clock.now();
    await this.vs.touchHeld(now);
    for (const v of await this.vs.idleSince(now - idleMs)) {
      if (!this.ctx.hosts.has(v.host_id)) continue;
      try {
        await this.park(v);
        this.ctx.log.info({ volume: v.id, host: v.host_id }, `volume ${v.id}: idle for ${Math.round(idleMs / 1000)} s, parked in the store`);
      } catch (err) {
        if (err instanceof DenError && err.code === "volume_in_use") continue; // mounted since the pass listed it
        this.ctx.log.warn({ err, volume: v.id }, `volume ${v.id}: idle, but could not be parked in the store (the next pass tries again)`);
      }
    }
  }

  /** Parks a volume in the store: uploaded from its host, whose image then goes (a drain's, so the volume outlives its host). */
  async park(v: VolumeRow): Promise<void> {
    await this.move(v, null);
  }

  private async move(v: VolumeRow, to: HostAgent | null, except?: string): Promise<void> {
    const { store, hosts, clock } = this.ctx;
    const parked = v.snapshot_id !== null;
    if (!parked && !hosts.has(v.host_id)) {
      throw new DenError("capacity_exhausted", `volume ${v.name} is on host ${v.host_id}, which is not up; it can be mounted when that host is back`, { volume: v.name, host: v.host_id });
    }
    const snapshotId = v.snapshot_id ?? newId("snap");
    // A parked copy's digests are its row's (recorded by its park); a new one's, its park's answer.
    const copy = parked ? await store.snapshots.get(snapshotId) : undefined;
    const ref: StoredRef = copy ? refOf(copy) : { id: snapshotId, key: snapshotKey(snapshotId, this.ctx.deployment) };
    await store.transaction(async (tx) => {
      await new VolumeStore(tx).beginMove(v.id, except, { snapshot_id: snapshotId, move_to: to?.instance ?? null, moved_at: clock.now(), move_owner: this.ctx.replica });
      if (!parked) await tx.snapshots.insert(pendingVolumeCopy(this.ctx, ref, v.owner));
    });
    faultPoint("volume-move-after-intent");
    let uploaded = parked;
    let fetched = false;
    try {
      if (!parked) {
        const from = hosts.get(v.host_id);
        const up = await from.volumes.park(newId("op"), v.id, ref);
        faultPoint("volume-move-after-upload");
        // From here the stored copy is the volume; the image it was made from is not.
        await store.transaction(async (tx) => {
          await tx.snapshots.complete(snapshotId, up.storedBytes, up.digests);
          if (!to) await new VolumeStore(tx).setPlace(v.id, { state: "ready", move_to: null, moved_at: null });
        });
        uploaded = true;
        if (up.digests) ref.digests = up.digests;
        faultPoint("volume-move-after-park");
        await this.removeImage(from, v, "its copy in the store is the volume now");
      }
      if (!to) return;
      await to.volumes.fetch(newId("op"), v.id, ref);
      fetched = true;
      faultPoint("volume-move-after-fetch");
      await store.transaction(async (tx) => {
        await new VolumeStore(tx).setPlace(v.id, { state: "ready", host_id: to.instance, snapshot_id: null, move_to: null, moved_at: null });
        await tx.snapshots.release(snapshotId, clock.now());
      });
      faultPoint("volume-move-after-commit");
      this.ctx.log.info({ volume: v.id, host: to.instance }, `volume ${v.id} moved to host ${to.instance}${parked ? " from the store" : ` from host ${v.host_id}`}`);
    } catch (e) {
      // A host that did not answer may still be copying: the move stays `moving` for the next start's `recover`.
      if (unanswered(e)) {
        this.ctx.log.warn({ volume: v.id }, `volume ${v.id}: a host did not answer while it moved; it stays moving until the next start`);
        throw e;
      }
      await this.undo({ ...v, snapshot_id: snapshotId, move_to: to?.instance ?? null }, uploaded, fetched);
      throw e;
    }
  }

  /**
   * A move that stopped: the volume is where the last committed step left it (its host's
   * image, or its stored copy once the upload committed); a copy made past that is removed.
   */
  private async undo(v: VolumeRow, uploaded: boolean, fetched: boolean): Promise<void> {
    const { store, hosts, clock } = this.ctx;
    await store.transaction(async (tx) => {
      if (!uploaded) await tx.snapshots.release(v.snapshot_id!, clock.now());
      await new VolumeStore(tx).setPlace(v.id, { state: "ready", move_to: null, moved_at: null, ...(uploaded ? {} : { snapshot_id: null }) });
    });
    // The new host's copy, if any: the volume is not there (its row says so now).
    if (v.move_to && (uploaded || v.move_to !== v.host_id) && hosts.has(v.move_to)) {
      await this.removeImage(hosts.get(v.move_to), v, fetched ? "the move's last step did not commit" : "its download did not finish");
    }
  }

  /**
   * Moves whose process is gone (an earlier one of this replica, begun before `startedAt`, or
   * another replica whose lease ran out): each is claimed, then ends where its last committed
   * step left the volume. A live replica's move is left to it.
   */
  async recover(startedAt: number): Promise<void> {
    const { store, replica, clock } = this.ctx;
    for (const v of await this.vs.abandonedMoves(replica, startedAt, await store.replicas.live(clock.now()))) {
      if (!(await this.vs.claimMove(v, replica))) continue;
      if (v.move_owner && v.move_owner !== replica) this.ctx.log.warn({ volume: v.id, from: v.move_owner }, `replica ${v.move_owner} is gone: undoing its move of volume ${v.id}`);
      const copy = v.snapshot_id ? await this.ctx.store.snapshots.get(v.snapshot_id) : undefined;
      const uploaded = copy?.state === "complete";
      await this.undo(v, uploaded, false);
      // Its upload committed but the host's image may not have been removed yet (undo removed it if the move was back to that host).
      if (uploaded && v.move_to !== v.host_id && this.ctx.hosts.has(v.host_id)) await this.removeImage(this.ctx.hosts.get(v.host_id), v, "its copy in the store is the volume");
    }
  }

  /** Drain: every volume whose image is on `host`, and that nothing running there holds, is parked in the store. */
  async parkAll(host: string): Promise<void> {
    for (const v of await this.vs.onHost(host)) {
      if (v.state !== "ready") continue;
      try {
        await this.park(v);
      } catch (err) {
        this.ctx.log.warn({ err, volume: v.id, host }, `drain: volume ${v.id} could not be parked in the store; the next drain call tries again`);
      }
    }
  }

  private async removeImage(host: HostAgent, v: VolumeRow, why: string): Promise<void> {
    try {
      await host.volumes.delete(v.id);
    } catch (err) {
      // A leftover image the row does not name is never mounted; the volumes' sweep removes it (Volumes.dropStrayImages).
      this.ctx.log.warn({ err, volume: v.id, host: host.instance }, `volume ${v.id}: its image on host ${host.instance} could not be removed (${why})`);
    }
  }
}

/** The catalog row of a volume's copy in the store, written before its upload starts. */
function pendingVolumeCopy(ctx: Ctx, ref: StoredRef, owner: string): StoredSnapshotRow {
  return { id: ref.id, owner, key: ref.key, kind: "volume", state: "pending", bytes: null, created_at: ctx.clock.now(), released_at: null, template: null, template_version: null, digests: null };
}
