import { deleteStoredSnapshot, listStoredSnapshots } from "@den/store";
import type { Ctx } from "./context.js";

/** Finished operations are kept this long, for whoever asks what happened. */
const OPERATIONS_KEPT_MS = 7 * 86_400_000;

/**
 * The only deleter of stored objects. It deletes a snapshot only once its catalog row
 * has been released for the grace period (so a restore or wake that is still reading it
 * finishes), only under this deployment's prefix or at the key its row names, and never
 * anything another deployment sharing the bucket wrote.
 */
export class StoreGc {
  constructor(private readonly ctx: Ctx) {}

  async collect(): Promise<void> {
    const { store, objects, hosts, deployment, clock, config } = this.ctx;
    const cutoff = clock.now() - config.storeGc.graceMs;
    for (const row of await store.releasedStoredSnapshots(cutoff)) {
      await deleteStoredSnapshot(objects, row.key);
      // Whichever host made it pinned its template version; the others have nothing to let go.
      for (const r of await hosts.each((h) => h.unpin(row.id))) if (!r.ok) throw r.error;
      await store.deleteStoredSnapshotRow(row.id);
    }
    // Objects under this deployment's prefix that no row names (a row is always written
    // before its upload starts, so these are leftovers of a lost row). Listed before the
    // catalog is read, so an upload that begins in between is never mistaken for one.
    const listed = await listStoredSnapshots(objects, deployment);
    const known = await store.storedSnapshotIds();
    for (const s of listed) if (!known.has(s.id) && s.modifiedAt <= cutoff) await deleteStoredSnapshot(objects, s.key);
    await objects.sweepAbandoned?.(`${deployment}/`);
    await store.pruneOperations(clock.now() - OPERATIONS_KEPT_MS);
  }
}
