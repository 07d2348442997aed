/**
 * The host's template cache: its versions (listed without local paths), the size variants
 * a create bakes on first use, and copies of versions to and from the store.
 */
import { existsSync } from "node:fs";
import { chmod, readFile, readdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { downloadSnapshot, manifestBytes, readStoredManifest, storedDigests, uploadSnapshot, type ObjectStore } from "@den/store";
import { DenError, type host } from "@den/protocol";
import { TEMPLATE_FILES, bakeVariant, type Runtime, type TemplateInfo } from "@den/runtime";
import type { Shape } from "../admission.js";
import { isStepTemplate } from "../build/build-cache.js";
import { runtimeManifestOf } from "./stored-manifest.js";

/** A runtime template as the protocol shows it: no local paths, no manifest. */
export function wireTemplate(t: TemplateInfo): host.HostTemplate {
  return {
    name: t.name, version: t.version, current: t.current, vcpus: t.manifest.vm.vcpus, memory_mb: t.manifest.vm.memoryMb, disk_mb: t.manifest.vm.diskMb, created_at: t.manifest.createdAt,
    source: t.manifest.source ?? null, run: t.manifest.run ?? null,
  };
}

export class TemplateCache {
  /** Size variants being baked, by template version and shape: concurrent first uses share one bake. */
  private readonly bakes = new Map<string, Promise<TemplateInfo>>();

  constructor(private readonly rt: Runtime, private readonly store: ObjectStore) {}

  /** The template a create spec names, and the shape its VM takes (the template's, where the spec does not say). */
  async shapeOf(spec: Omit<host.HostCreateSpec, "id">): Promise<{ tpl: TemplateInfo; shape: Shape }> {
    const tpl = await this.rt.templates.resolve(spec.template);
    return { tpl, shape: { vcpus: spec.vcpus ?? tpl.manifest.vm.vcpus, memoryMb: spec.memoryMb ?? tpl.manifest.vm.memoryMb, diskMb: spec.diskMb ?? tpl.manifest.vm.diskMb } };
  }

  /** `base` baked for another vCPU count and memory size (a template snapshot fixes both), once. */
  variant(base: TemplateInfo, vcpus: number, memoryMb: number): Promise<TemplateInfo> {
    const key = `${base.name}@${base.version}/${vcpus}/${memoryMb}`;
    let p = this.bakes.get(key);
    if (!p) {
      p = bakeVariant(this.rt, base, vcpus, memoryMb).finally(() => this.bakes.delete(key));
      this.bakes.set(key, p);
    }
    return p;
  }

  async list(): Promise<host.HostTemplate[]> {
    // (A build cache's steps are internal: they are nobody's templates.)
    return (await this.rt.templates.list()).filter((t) => !isStepTemplate(t.name)).map(wireTemplate);
  }

  async delete(name: string): Promise<void> {
    const names = new Set((await this.rt.templates.list()).map((t) => t.name).filter((n) => n === name || n.startsWith(`${name}.`)));
    for (const n of names) await this.rt.templates.retire(n);
    await this.rt.gc();
  }

  /**
   * Uploads a version, even over a copy already there: the digests it answers with are of
   * the bytes this host put (the control plane records them), never the store's word for
   * what it holds. (The control plane asks only for versions it has no complete record of.)
   */
  async publish(name: string, version: string, key: string): Promise<{ storedBytes: number; digests: host.StoredDigests }> {
    const tpl = await this.rt.templates.resolve(`${name}@${version}`);
    const files = Object.values(TEMPLATE_FILES).filter((f) => existsSync(join(tpl.dir, f)));
    const raw = JSON.parse(await readFile(join(tpl.dir, "manifest.json"), "utf8")) as unknown;
    const stored = await uploadSnapshot(this.store, key, tpl.dir, files, raw);
    return { storedBytes: manifestBytes(stored), digests: storedDigests(stored) };
  }

  /**
   * Installs a version from the store: its manifest checked against `digests` (the control
   * plane's record of its upload; without, a version recorded before digests were: its
   * fields only), every field of it and of the template's manifest in it, which must be of
   * this very version, before anything is downloaded; each object checked as it comes.
   */
  async fetch(name: string, version: string, key: string, current: boolean, digests?: host.StoredDigests): Promise<void> {
    const ref = { name, version };
    if (this.rt.templates.has(ref)) {
      if (current && this.rt.templates.current(name) !== version) await this.rt.templates.setCurrent(ref);
      return;
    }
    const stored = await readStoredManifest(this.store, key, digests);
    const m = runtimeManifestOf(stored, `stored template ${name}@${version}`);
    if (m.kind !== "template" || m.template.name !== name || m.template.version !== version) {
      throw new DenError("snapshot_corrupt", `stored template ${name}@${version}: its manifest is of ${m.kind} ${m.template.name}@${m.template.version}`);
    }
    const dir = await this.rt.templates.buildDir(ref);
    try {
      await downloadSnapshot(this.store, key, dir, undefined, stored);
      // The files are read-only from here on, as a built template's are.
      for (const f of await readdir(dir)) if (f !== "manifest.json") await chmod(join(dir, f), 0o444);
      if (current || !this.rt.templates.current(name)) await this.rt.templates.install(ref, dir);
      else await rename(dir, this.rt.templates.dir(ref));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
}
