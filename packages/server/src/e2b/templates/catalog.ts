/**
 * What a template name means on the E2B surface. Den has one namespace: an E2B templateID,
 * alias and name are all the Den template's name; a tag (`name:tag`) picks the newest
 * successful build carrying it (`name@version`), a plain name the template's current
 * version. Alias lookups, a template with its builds, its tags, and the templates builds
 * start from are answered here (E2B-API.md, "Names").
 */
import { DenError, type HostTemplate, type e2bTemplates } from "@den/protocol";
import type { BuildRow } from "@den/control-plane";
import type { ControlPlane } from "@den/control-plane";
import type { Principal } from "@den/control-plane";
import { e2bBuild, tagsOf } from "./mapping.js";
import { DEFAULT_TAG, isDenName, parseName, plainName } from "./names.js";
import type { SourceTemplate } from "./steps.js";

/** Builds of one template read for its list and its tags (older ones are pruned anyway). */
const MAX_BUILDS = 1000;
const DEFAULT_SHAPE = { vcpus: 1, memoryMb: 512 };

export class E2bTemplateCatalog {
  constructor(private readonly cp: ControlPlane) {}

  /** The builds of `name` the caller sees, newest first. */
  private builds(p: Principal, name: string): Promise<BuildRow[]> {
    return this.cp.builds.rows(p, name, MAX_BUILDS);
  }

  /** A host's version of a template: `name@version`, or the current one of `name`. */
  private async hostVersion(spec: string): Promise<HostTemplate | undefined> {
    const [name, version] = spec.split("@");
    return (await this.cp.templates.hostTemplates()).find((t) => t.name === name && (version ? t.version === version : t.current));
  }

  /**
   * `GET /templates/aliases/{alias}`: the caller's template (or checkpoint) by that name, or
   * one of the host's own (public); another owner's is a 403 (it exists, the client's
   * `Template.exists` says true: the name cannot be built); none is a 404.
   */
  async alias(p: Principal, alias: string): Promise<e2bTemplates.TemplateAliasResponse> {
    const name = alias.split(":")[0]!;
    const none = new DenError("not_found", `template ${JSON.stringify(alias.slice(0, 80))} does not exist`);
    if (!isDenName(name)) throw none;
    const row = await this.cp.templates.row(name);
    if (row && row.owner !== p.owner && !p.admin) throw new DenError("forbidden", `template ${name} belongs to another owner`);
    if (row?.deleted_at === null) return { templateID: name, public: false };
    if (!row && (await this.cp.templates.hostTemplates()).some((t) => t.name === name)) return { templateID: name, public: true };
    if ((await this.cp.listCheckpoints(p)).some((c) => c.name === name)) return { templateID: name, public: false };
    throw none;
  }

  /** `GET /templates/{templateID}`: the caller's template (or the host's) and its builds, a page of them newest first. */
  async withBuilds(p: Principal, templateID: string, limit: number, after: string | undefined): Promise<{ template: e2bTemplates.TemplateWithBuilds; next: string | null }> {
    const name = plainName(templateID);
    const row = await this.cp.templates.row(name);
    const mine = row && row.deleted_at === null && (row.owner === p.owner || p.admin);
    const builds = row && !mine ? [] : await this.builds(p, name);
    const hosts = !row && (await this.cp.templates.hostTemplates()).some((t) => t.name === name);
    if (!mine && !hosts && !builds.length) throw new DenError("template_not_found", `template ${JSON.stringify(name)} does not exist`);
    const current = await this.hostVersion(name);
    const shape = current ? { vcpus: current.vcpus, memoryMb: current.memory_mb } : DEFAULT_SHAPE;
    const start = after ? builds.findIndex((b) => b.id === after) + 1 : 0;
    if (after && start === 0) throw new DenError("invalid_argument", "nextToken is not a token this server gave out");
    const page = builds.slice(start, start + limit);
    const first = row?.created_at ?? builds.at(-1)?.created_at ?? (current ? Date.parse(current.created_at) || 0 : 0);
    const last = builds[0] ? builds[0].finished_at ?? builds[0].created_at : first;
    return {
      template: {
        templateID: name, aliases: [name], names: [name], public: hosts, createdAt: new Date(first).toISOString(), updatedAt: new Date(last).toISOString(),
        lastSpawnedAt: null, spawnCount: 0, builds: page.map((b) => e2bBuild(b, shape)),
      },
      next: start + limit < builds.length ? page.at(-1)!.id : null,
    };
  }

  /** `GET /templates/{templateID}/tags`: each tag of the caller's successful builds of it, on the newest build carrying it. */
  async tags(p: Principal, templateID: string): Promise<e2bTemplates.TemplateTag[]> {
    const name = plainName(templateID);
    const row = await this.cp.templates.row(name);
    if (!row || row.deleted_at !== null || (row.owner !== p.owner && !p.admin)) throw new DenError("template_not_found", `template ${JSON.stringify(name)} does not exist`);
    const out = new Map<string, e2bTemplates.TemplateTag>();
    for (const b of await this.builds(p, name)) {
      if (b.state !== "ready") continue;
      for (const tag of tagsOf(b)) if (!out.has(tag)) out.set(tag, { tag, buildID: b.id, createdAt: new Date(b.finished_at ?? b.created_at).toISOString() });
    }
    return [...out.values()];
  }

  /**
   * A template reference as Den's create takes it: `name:tag` is the version of the newest
   * successful build with that tag (`default` with none: the current version); anything
   * else is returned as it is (a name, a checkpoint's id or name).
   */
  async sandboxTemplate(p: Principal, ref: string): Promise<string> {
    if (!ref.includes(":")) return ref;
    const { name, tag } = parseName(ref);
    const tagged = (await this.builds(p, name)).find((b) => b.state === "ready" && b.version && tagsOf(b).includes(tag!));
    if (tagged) return `${name}@${tagged.version}`;
    if (tag === DEFAULT_TAG) return name;
    throw new DenError("template_not_found", `template ${name} has no build tagged ${tag}`);
  }

  /** A template a build may start from: the caller's or the host's, current (or the tagged build's version). */
  async source(p: Principal, ref: string): Promise<SourceTemplate | undefined> {
    const spec = await this.sandboxTemplate(p, ref).catch(() => undefined);
    if (!spec || !(await this.cp.templates.usable(p, spec.split("@")[0]!))) return undefined;
    const t = await this.hostVersion(spec);
    return t ? { spec, user: t.run?.user ?? null, vcpus: t.vcpus, memoryMb: t.memory_mb } : undefined;
  }

  /** Whether a template (anyone's, not deleted, or the host's) has this name: a snapshot may not take it. */
  async taken(name: string): Promise<boolean> {
    const row = await this.cp.templates.row(name);
    if (row) return row.deleted_at === null;
    return (await this.cp.templates.hostTemplates()).some((t) => t.name === name);
  }
}
