import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdir, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { isAlive } from "./qemu.js";
import { readManifest, type SnapshotManifest, type TemplateRef } from "./snapshot.js";
import { TEMPLATE_NAME, TEMPLATE_VERSION, checkTemplateName, isTemplateRef } from "./template-names.js";

export const TEMPLATE_FILES = {
  kernel: "vmlinux",
  initrd: "initrd.cpio",
  disk: "disk.qcow2",
  memory: "memory.bin",
  state: "state.bin",
  recipe: "recipe.json",
} as const;

const NAME = TEMPLATE_NAME;
const VERSION = TEMPLATE_VERSION;
/** Templates a template's disk may sit on, at most (bake.ts keeps it at 3). */
const MAX_DISK_CHAIN = 8;

export interface TemplateInfo extends TemplateRef {
  dir: string;
  current: boolean;
  manifest: SnapshotManifest;
}

export { checkTemplateName };

/**
 * Template versions on disk: `templates/<name>/<version>/` holds a template snapshot
 * (memory.bin, state.bin, disk.qcow2) plus the kernel and initrd for cold boots, and
 * `templates/<name>/current` names the version new sandboxes use. Versions are immutable.
 */
export class TemplateStore {
  constructor(readonly root: string) {}

  /** A version's directory; a name or version that is not one (`../snapshots`) never makes a path. */
  dir(ref: TemplateRef): string {
    if (!isTemplateRef(ref)) throw new DenError("invalid_argument", `not a template version: ${String(JSON.stringify(ref)).slice(0, 200)}`);
    return join(this.root, ref.name, ref.version);
  }

  /**
   * A template version's disk and the disks under it, top first: each its base template's
   * (bake.ts), as the manifests Den wrote say; what each image's header must name (image-check.ts).
   */
  diskChain(ref: TemplateRef): string[] {
    const chain: string[] = [];
    for (let r: TemplateRef | undefined = ref; r; r = this.baseOf(r)) {
      if (!NAME.test(r.name) || !VERSION.test(r.version)) throw new DenError("template_not_found", `not a template version: ${JSON.stringify(r)}`);
      if (chain.length >= MAX_DISK_CHAIN) throw new DenError("disk_corrupt", `template ${ref.name}@${ref.version}'s disk sits on more than ${MAX_DISK_CHAIN} templates`);
      chain.push(join(this.dir(r), TEMPLATE_FILES.disk));
    }
    return chain;
  }

  /** The template a version's disk overlays (its manifest's baseTemplate), if any. */
  private baseOf(ref: TemplateRef): TemplateRef | undefined {
    let text: string;
    try {
      text = readFileSync(join(this.dir(ref), "manifest.json"), "utf8");
    } catch {
      throw new DenError("template_not_found", `template ${ref.name}@${ref.version} is not on this host`);
    }
    return (JSON.parse(text) as SnapshotManifest).baseTemplate;
  }

  current(name: string): string | undefined {
    try {
      const v = readFileSync(join(this.root, name, "current"), "utf8").trim();
      return VERSION.test(v) ? v : undefined;
    } catch {
      return undefined;
    }
  }

  /** Resolves `name` (its current version) or `name@version`. */
  async resolve(spec: string): Promise<TemplateInfo> {
    const [name, version] = spec.split("@", 2) as [string, string | undefined];
    checkTemplateName(name);
    if (version !== undefined && !VERSION.test(version)) throw new DenError("invalid_argument", `template version must be 12 hex digits, got ${JSON.stringify(version)}`);
    const v = version ?? this.current(name);
    if (!v || !existsSync(join(this.root, name, v, "manifest.json"))) {
      throw new DenError("template_not_found", version ? `template ${name}@${version} does not exist` : `template ${name} does not exist; build it with \`den template build ${name}\``);
    }
    const manifest = await readManifest(join(this.root, name, v));
    return { name, version: v, dir: join(this.root, name, v), current: this.current(name) === v, manifest };
  }

  async list(): Promise<TemplateInfo[]> {
    const out: TemplateInfo[] = [];
    if (!existsSync(this.root)) return out;
    for (const name of readdirSync(this.root).sort()) {
      if (!NAME.test(name)) continue;
      for (const version of readdirSync(join(this.root, name)).sort()) {
        if (!VERSION.test(version) || !existsSync(join(this.root, name, version, "manifest.json"))) continue;
        out.push(await this.resolve(`${name}@${version}`));
      }
    }
    return out;
  }

  has(ref: TemplateRef): boolean {
    return isTemplateRef(ref) && existsSync(join(this.dir(ref), "manifest.json"));
  }

  /** A private build directory that `install` later moves into place atomically. */
  async buildDir(ref: TemplateRef): Promise<string> {
    this.dir(ref); // (checks the ref)
    const dir = join(this.root, ref.name, `.build-${ref.version}-${process.pid}`);
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true });
    return dir;
  }

  async install(ref: TemplateRef, buildDir: string): Promise<void> {
    const final = this.dir(ref);
    await rm(final, { recursive: true, force: true });
    await rename(buildDir, final);
    await this.setCurrent(ref);
  }

  /**
   * Retires a template name: it no longer resolves, and its versions go at the next gc
   * once nothing references them (sandboxes and snapshots that use one keep it).
   */
  async retire(name: string): Promise<void> {
    checkTemplateName(name);
    await rm(join(this.root, name, "current"), { force: true });
  }

  async setCurrent(ref: TemplateRef): Promise<void> {
    this.dir(ref); // (checks the ref)
    const tmp = join(this.root, ref.name, ".current.tmp");
    await writeFile(tmp, ref.version + "\n");
    await rename(tmp, join(this.root, ref.name, "current"));
  }

  /** Removes versions that are not current and that no sandbox or snapshot references. */
  async gc(referenced: Set<string>): Promise<string[]> {
    const removed: string[] = [];
    if (!existsSync(this.root)) return removed;
    for (const name of readdirSync(this.root)) {
      if (!NAME.test(name)) continue;
      const cur = this.current(name);
      for (const version of readdirSync(join(this.root, name))) {
        const key = `${name}@${version}`;
        if (version.startsWith(".build-")) {
          const pid = Number(version.split("-").pop());
          if (!Number.isNaN(pid) && pid !== process.pid && !isAlive(pid)) await rm(join(this.root, name, version), { recursive: true, force: true });
          continue;
        }
        if (!VERSION.test(version) || version === cur || referenced.has(key)) continue;
        await rm(join(this.root, name, version), { recursive: true, force: true });
        removed.push(key);
      }
    }
    return removed;
  }
}
