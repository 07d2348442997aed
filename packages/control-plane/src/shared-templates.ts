import { DenError, type HostAgent } from "@den/protocol";
import { newId } from "@den/protocol";
import { storedSnapshotComplete, templateKey } from "@den/store";
import { digestsOf, type TemplateVersionRow } from "./db/store.js";
import type { Ctx, TemplateShare } from "./context.js";

/** A claim older than this whose upload never completed (its replica died) is given up and made again. */
const STALE_CLAIM_MS = 60 * 60 * 1000;

/**
 * Template versions in the shared store, so a host that lacks one can pull it (a cold
 * sandbox wakes on any host; a new host needs no build of its own). A host's versions are
 * uploaded once for the deployment (whoever claims the row uploads; the row is `complete`
 * when the copy is whole); a host chosen for a version it lacks downloads and verifies it
 * first. Only a deployment of registered hosts (`--host-agent registered`) shares them: a
 * single node has no one to share with, and a static list builds its templates on each host.
 */
export class SharedTemplates implements TemplateShare {
  private publishing = new Map<string, Promise<void>>();

  constructor(private readonly ctx: Ctx) {}

  get enabled(): boolean {
    return this.ctx.config.hostAgent.kind === "remote" && this.ctx.config.hostAgent.registered === true;
  }

  /** Uploads, in the background, every version `host` has that the store does not. */
  publishFrom(host: HostAgent): void {
    if (!this.enabled || this.publishing.has(host.instance)) return;
    const run = this.publish(host)
      .catch((err: unknown) => this.ctx.log.warn({ err, host: host.instance }, "could not publish the host's templates to the store; tried again when it is next reconciled"))
      .finally(() => this.publishing.delete(host.instance));
    this.publishing.set(host.instance, run);
  }

  /** Resolves when the uploads started for `host` are over (tests, drains). */
  async settled(host: string): Promise<void> {
    await this.publishing.get(host);
  }

  private async publish(host: HostAgent): Promise<void> {
    const { store, clock, deployment, log } = this.ctx;
    const known = new Map((await store.templates.versions()).map((r) => [`${r.name}@${r.version}`, r]));
    for (const t of await host.templates.list()) {
      const have = known.get(`${t.name}@${t.version}`);
      // Complete, and still there (a store emptied by hand, or another store, is filled again).
      if (have?.state === "complete" && (await storedSnapshotComplete(this.ctx.objects, have.key))) continue;
      // Another's upload under way, unless its host is gone (a host killed mid-upload leaves its claim behind).
      if (have?.state === "pending" && clock.now() - have.created_at < STALE_CLAIM_MS && (await this.hostLive(have.host_id))) continue;
      if (have) await store.templates.dropVersion(t.name, t.version, have.state);
      const row: TemplateVersionRow = { name: t.name, version: t.version, key: templateKey(t.name, t.version, deployment), state: "pending", bytes: null, host_id: host.instance, created_at: clock.now(), digests: null };
      if (!(await store.templates.claimVersion(row))) continue;
      try {
        // What the host says it put is the record every other host's pull is checked against.
        const { storedBytes, digests } = await host.templates.publish(newId("op"), t.name, t.version, row.key);
        await store.templates.completeVersion(t.name, t.version, storedBytes, digests);
        log.info({ template: `${t.name}@${t.version}`, host: host.instance, bytes: storedBytes }, `template ${t.name}@${t.version} is in the store`);
      } catch (e) {
        await store.templates.dropVersion(t.name, t.version);
        throw e;
      }
    }
  }

  /** Whether a host is registered (or configured) and its lease runs. */
  private async hostLive(id: string): Promise<boolean> {
    const h = await this.ctx.store.hosts.get(id);
    return !!h && h.state !== "removed" && (h.managed === "config" || (h.lease_until ?? 0) > this.ctx.clock.now());
  }

  /**
   * How a host lacking template `spec` (`name` or `name@version`) would get it: a pull of the
   * stored version (a bare name: the newest of that name in the store), or undefined.
   */
  async pullFor(spec: string): Promise<((h: HostAgent) => Promise<void>) | undefined> {
    if (!this.enabled) return undefined;
    const [name, version] = spec.split("@", 2) as [string, string | undefined];
    const row = (await this.ctx.store.templates.versions()).filter((r) => r.state === "complete" && r.name === name && (version === undefined || r.version === version)).at(-1);
    if (!row) return undefined;
    return async (h) => {
      // A version is the hash of its recipe and its host's kind: it is only any use on a host of that kind.
      const [from, to] = await Promise.all([this.ctx.store.hosts.get(row.host_id), this.ctx.store.hosts.get(h.instance)]);
      if (from?.kind && to?.kind && from.kind !== to.kind) throw new DenError("template_not_found", `template ${row.name}@${row.version} was built on another kind of host than ${h.instance}`);
      this.ctx.log.info({ template: `${row.name}@${row.version}`, host: h.instance }, `host ${h.instance} pulls template ${row.name}@${row.version} from the store`);
      // The host checks the copy against the digests its publish recorded before it reads any
      // of it (a version recorded before digests were has none: the host goes by the store's manifest).
      await h.templates.fetch(newId("op"), row.name, row.version, row.key, version === undefined, digestsOf(row.digests));
    };
  }
}
