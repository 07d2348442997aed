import { collectContexts } from "./build-contexts.js";
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
    for (const row of await store.snapshots.released(cutoff)) {
      await deleteStoredSnapshot(objects, row.key);
      // Whichever host made it pinned its template version; the others have nothing to let go.
      for (const r of await hosts.each((h) => h.snapshots.unpin(row.id))) if (!r.ok) throw r.error;
      await store.snapshots.deleteRow(row.id);
    }
    // Objects under this deployment's prefix that no row names (a row is always written
    // before its upload starts, so these are leftovers of a lost row). Listed before the
    // catalog is read, so an upload that begins in between is never mistaken for one.
    const listed = await listStoredSnapshots(objects, deployment);
    const known = await store.snapshots.ids();
    for (const s of listed) if (!known.has(s.id) && s.modifiedAt <= cutoff) await deleteStoredSnapshot(objects, s.key);
    await this.collectTemplates(cutoff);
    await collectContexts(this.ctx, config.storeGc.contextMaxAgeMs);
    await objects.sweepAbandoned?.(`${deployment}/`);
    await store.operations.prune(clock.now() - OPERATIONS_KEPT_MS);
  }

  /**
   * Template versions in the shared store that nothing needs any more: no stored snapshot
   * restores onto one, no sandbox that is not destroyed was made from it, and no live host
   * has it (a template deleted through the API, or a version its hosts let go of). The row
   * goes first, then its objects; objects under `templates/` that no row names are leftovers
   * of a row that went (or of an upload whose claim never committed).
   */
  private async collectTemplates(cutoff: number): Promise<void> {
    const { store, objects, hosts, deployment } = this.ctx;
    const root = `${deployment}/templates/`;
    // Listed before the rows are read, so an upload that claims its row in between is never mistaken for a leftover.
    const listed = await objects.list(root);
    const rows = await store.templates.versions();
    const needed = await store.templates.sandboxVersions();
    for (const p of await store.snapshots.templatePins()) if (typeof p !== "string") needed.add(`${p.template.name}@${p.template.version}`);
    const held = await hosts.each((h) => h.templates.list());
    // A host that did not answer may hold any of them: nothing goes this pass.
    if (held.some((r) => !r.ok)) return;
    for (const r of held) if (r.ok) for (const t of r.value) needed.add(`${t.name}@${t.version}`);
    const known = new Set<string>();
    for (const row of rows) {
      if (row.state !== "complete" || row.created_at > cutoff || needed.has(`${row.name}@${row.version}`)) {
        known.add(row.key);
        continue;
      }
      await store.templates.dropVersion(row.name, row.version, "complete");
      await deleteStoredSnapshot(objects, row.key);
      this.ctx.log.info({ template: `${row.name}@${row.version}` }, `template ${row.name}@${row.version} is no longer needed: deleted from the store`);
    }
    // `<deployment>/templates/<name>/<version>/<file>`: a version's key is its first four parts.
    for (const o of listed) {
      const key = o.key.split("/").slice(0, 4).join("/");
      if (!known.has(key) && o.modifiedAt <= cutoff) await objects.delete(o.key);
    }
  }
}
