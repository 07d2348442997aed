import type { host } from "@den/protocol";
import { digestsJson, type TemplateRow, type TemplateVersionRow } from "./rows.js";
import { Repo } from "./repo.js";

/** Templates made through the API, and template versions shared through the store. */
export class TemplatesRepo extends Repo {
  /** Claims the upload of a template version: true for the one caller that gets to do it. */
  async claimVersion(row: TemplateVersionRow): Promise<boolean> {
    const r = await this.db.insertInto("template_versions").values(row).onConflict((oc) => oc.columns(["name", "version"]).doNothing()).executeTakeFirst();
    return Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
  }

  /** Its upload is whole: `digests`, what the host said it put (the record a host's fetch is checked against). */
  async completeVersion(name: string, version: string, bytes: number, digests: host.StoredDigests | undefined): Promise<void> {
    await this.db.updateTable("template_versions").set({ state: "complete", bytes, digests: digestsJson(digests) }).where("name", "=", name).where("version", "=", version).execute();
  }

  /** Gives up a claim whose upload failed (or a copy that is gone), so it is made again. */
  async dropVersion(name: string, version: string, state = "pending"): Promise<void> {
    await this.db.deleteFrom("template_versions").where("name", "=", name).where("version", "=", version).where("state", "=", state).execute();
  }

  /** `name@version` of every template version a sandboxes row that is not destroyed was made from (it may still go to the store and wake elsewhere). */
  async sandboxVersions(): Promise<Set<string>> {
    const rows = await this.db.selectFrom("sandboxes").select(["template", "template_version"]).distinct().where("state", "!=", "destroyed").execute();
    return new Set(rows.map((r) => `${r.template}@${r.template_version}`));
  }

  async versions(): Promise<TemplateVersionRow[]> {
    return this.db.selectFrom("template_versions").selectAll().orderBy("created_at").execute();
  }

  async rows(): Promise<Map<string, TemplateRow>> {
    const rows = await this.db.selectFrom("templates").selectAll().execute();
    return new Map(rows.map((r) => [r.name, r]));
  }

  async row(name: string): Promise<TemplateRow | undefined> {
    return this.db.selectFrom("templates").selectAll().where("name", "=", name).executeTakeFirst();
  }

  /** Claims a name for an owner (or takes back their deleted one). */
  async claim(name: string, owner: string, at: number): Promise<void> {
    await this.db.insertInto("templates").values({ name, owner, created_at: at, deleted_at: null, run: null })
      .onConflict((oc) => oc.column("name").doUpdateSet({ deleted_at: null })).execute();
  }

  /** Records how a template's sandboxes run (its latest build's source and defaults). */
  async setRun(name: string, run: string | null): Promise<void> {
    await this.db.updateTable("templates").set({ run }).where("name", "=", name).execute();
  }

  async markDeleted(name: string, at: number): Promise<void> {
    await this.db.updateTable("templates").set({ deleted_at: at }).where("name", "=", name).execute();
  }

  async drop(name: string): Promise<void> {
    await this.db.deleteFrom("templates").where("name", "=", name).execute();
  }

  async count(owner: string): Promise<number> {
    const r = await this.db.selectFrom("templates").select((eb) => eb.fn.countAll<number>().as("n")).where("owner", "=", owner).where("deleted_at", "is", null).executeTakeFirstOrThrow();
    return Number(r.n);
  }
}
