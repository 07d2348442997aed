/**
 * The template cache of an in-memory host: versions (a guest image and a shape) by name,
 * the current version of each name, retirement and garbage collection, with the runtime's
 * TemplateStore errors. Holds `base` from the start: the shape of the real base recipe
 * (packages/images/recipes/base.json) over a small Debian-like tree.
 */
import { createHash } from "node:crypto";
import { DenError, type host } from "@den/protocol";
import { MemoryFs, dir, serializeTree } from "./memory-fs.js";
import type { GuestImage } from "./memory-guest.js";

export interface TemplateRef {
  name: string;
  version: string;
}

export interface MemoryTemplate extends TemplateRef {
  vcpus: number;
  memoryMb: number;
  diskMb: number;
  createdAt: string;
  /** What a sandbox made from it starts with. */
  guest: GuestImage;
  /** A size variant's or a built template's source (kept while this one is). */
  baseTemplate?: TemplateRef;
}

const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const VERSION = /^[0-9a-f]{12}$/;
/** packages/images/recipes/base.json's shape. */
const BASE_SHAPE = { vcpus: 1, memoryMb: 512, diskMb: 4096 };
/** Template files have a fixed time, so `base` has one version on every in-memory host. */
const TEMPLATE_TIME = Date.UTC(2025, 0, 1);

export function checkTemplateName(name: string): void {
  if (!NAME.test(name)) throw new DenError("invalid_argument", `template name must match ${NAME}, got ${JSON.stringify(name)}`);
}

export const refKey = (r: TemplateRef) => `${r.name}@${r.version}`;

/** Where the guest reads the id of its boot (`boot_id`), as Linux has it. */
export const BOOT_ID_DIR = "/proc/sys/kernel/random";

/** A version: the first 12 hex digits of the sha256 of what it is made of. */
export function versionOf(recipe: unknown): string {
  return createHash("sha256").update(JSON.stringify(recipe)).digest("hex").slice(0, 12);
}

/** The `base` template: root and `user` (uid 1000), /tmp, /home/user, /workspace, /etc/passwd, /dev/null. */
export function baseTemplate(): MemoryTemplate {
  const fs = new MemoryFs({ root: dir(TEMPLATE_TIME), limitBytes: Infinity }, () => TEMPLATE_TIME);
  const root = { uid: 0, gid: 0 };
  // /workspace as the real base has it (build-rootfs.sh makes it).
  for (const d of ["/bin", "/dev", "/etc", "/home", "/mnt", "/root", "/usr/bin", "/usr/local/bin", "/var/tmp", "/workspace"]) fs.mkdir(d, { parents: true, owner: root, mode: d === "/root" ? 0o700 : 0o755 });
  fs.mkdir("/tmp", { owner: root, mode: 0o1777 });
  fs.mkdir("/home/user", { owner: { uid: 1000, gid: 1000 }, mode: 0o755 });
  fs.write("/etc/passwd", Buffer.from("root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n"), { owner: root });
  fs.write("/etc/group", Buffer.from("root:x:0:\nsudo:x:27:user\nuser:x:1000:\n"), { owner: root });
  fs.write("/etc/hostname", Buffer.from("den\n"), { owner: root });
  fs.write("/etc/os-release", Buffer.from('PRETTY_NAME="Debian GNU/Linux 12 (bookworm), in memory"\nID=debian\nVERSION_ID="12"\n'), { owner: root });
  fs.write("/dev/null", Buffer.alloc(0), { owner: root, mode: 0o666 });
  // The kernel's id of this boot: a create restores the template's (no boot), a disk wake makes a new one.
  fs.mkdir(BOOT_ID_DIR, { parents: true, owner: root, mode: 0o555 });
  fs.write(`${BOOT_ID_DIR}/boot_id`, Buffer.from("6f1c1d0e-0d3e-4c1b-9a1e-den0template0\n"), { owner: root, mode: 0o444 });
  const guest: GuestImage = { files: serializeTree(fs.rootFs.root), processes: [], nextProc: 1, nextPid: 300 };
  return { name: "base", version: versionOf({ recipe: "base", ...BASE_SHAPE, guest }), ...BASE_SHAPE, createdAt: new Date(TEMPLATE_TIME).toISOString(), guest };
}

/** A template as the protocol shows it. */
export function wireTemplate(t: MemoryTemplate, current: boolean): host.HostTemplate {
  return { name: t.name, version: t.version, current, vcpus: t.vcpus, memory_mb: t.memoryMb, disk_mb: t.diskMb, created_at: t.createdAt };
}

export class MemoryTemplates {
  private readonly versions = new Map<string, MemoryTemplate>();
  private readonly currentOf = new Map<string, string>();

  /** `name` (its current version) or `name@version`. */
  resolve(spec: string): MemoryTemplate {
    const [name, version] = spec.split("@", 2) as [string, string | undefined];
    checkTemplateName(name);
    if (version !== undefined && !VERSION.test(version)) throw new DenError("invalid_argument", `template version must be 12 hex digits, got ${JSON.stringify(version)}`);
    const t = this.versions.get(`${name}@${version ?? this.currentOf.get(name)}`);
    if (!t) throw new DenError("template_not_found", version ? `template ${name}@${version} does not exist` : `template ${name} does not exist; build it with \`den template build ${name}\``);
    return t;
  }

  /**
   * A size variant of `base`: `<name>.<vcpus>c<memory>m` at the base's version (made on
   * first use, current from then on).
   */
  variant(base: MemoryTemplate, vcpus: number, memoryMb: number): MemoryTemplate {
    if (!Number.isInteger(vcpus) || vcpus < 1 || vcpus > 16) throw new DenError("invalid_argument", "vcpus must be an integer in 1..16");
    if (!Number.isInteger(memoryMb) || memoryMb < 128 || memoryMb > 65536) throw new DenError("invalid_argument", "memoryMb must be an integer in 128..65536");
    const ref = { name: `${base.name}.${vcpus}c${memoryMb}m`, version: base.version };
    if (!this.has(ref)) this.install({ ...base, ...ref, vcpus, memoryMb, baseTemplate: { name: base.name, version: base.version } }, true);
    return this.resolve(refKey(ref));
  }

  has(ref: TemplateRef): boolean {
    return this.versions.has(refKey(ref));
  }

  current(name: string): string | undefined {
    return this.currentOf.get(name);
  }

  /** Adds a version; it becomes current if asked, or if its name has none. */
  install(t: MemoryTemplate, current: boolean): void {
    checkTemplateName(t.name);
    this.versions.set(refKey(t), t);
    if (current || !this.currentOf.has(t.name)) this.currentOf.set(t.name, t.version);
  }

  setCurrent(ref: TemplateRef): void {
    this.resolve(refKey(ref));
    this.currentOf.set(ref.name, ref.version);
  }

  /** The name no longer resolves; its versions go at a gc once nothing references them. */
  retire(name: string): void {
    checkTemplateName(name);
    this.currentOf.delete(name);
  }

  /** Every version (as a state file keeps them). */
  all(): MemoryTemplate[] {
    return [...this.versions.values()];
  }

  /** The current version of each name. */
  currents(): Record<string, string> {
    return Object.fromEntries(this.currentOf);
  }

  /** Puts back versions and currents as a state file kept them (in place of what it has). */
  load(versions: MemoryTemplate[], current: Record<string, string>): void {
    this.versions.clear();
    this.currentOf.clear();
    for (const t of versions) this.versions.set(refKey(t), t);
    for (const [name, version] of Object.entries(current)) this.currentOf.set(name, version);
  }

  list(): host.HostTemplate[] {
    return [...this.versions.values()]
      .sort((a, b) => refKey(a).localeCompare(refKey(b)))
      .map((t) => wireTemplate(t, this.currentOf.get(t.name) === t.version));
  }

  /** Removes versions that are not current and that nothing in `referenced` (name@version) or another version needs. */
  gc(referenced: Set<string>): void {
    for (const t of this.versions.values()) if (t.baseTemplate) referenced.add(refKey(t.baseTemplate));
    for (const [key, t] of this.versions) {
      if (this.currentOf.get(t.name) !== t.version && !referenced.has(key)) this.versions.delete(key);
    }
  }
}
