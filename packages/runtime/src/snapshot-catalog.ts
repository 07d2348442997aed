import { existsSync, readdirSync, readFileSync } from "node:fs";
import { cp, mkdir, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import type { DataDirLayout } from "./data-dir.js";
import type { HostProfile } from "./host.js";
import type { VmPool } from "./pool.js";
import type { SandboxRegistry } from "./registry.js";
import type { SnapshotOptions } from "./sandbox-snapshot.js";
import { checkCompatible, digestFiles, readManifest, verifySnapshot, writeManifest, type SnapshotManifest, type TemplateRef } from "./snapshot.js";
import { TEMPLATE_FILES, type TemplateStore } from "./templates.js";
import { ID_PATTERN, newId, privateDir } from "./util.js";
import { renameBacking } from "./image-tools.js";
import type { StateSink } from "./vm.js";

/** A deleted snapshot keeps its directory (a sandbox's disk may still sit on it) with this file in it. */
export const DELETED_MARKER = "deleted";

export interface SnapshotInfo {
  id: string;
  dir: string;
  manifest: SnapshotManifest;
}

export type TakeSnapshotOptions = { keepRunning?: boolean; ignoreShared?: boolean; id?: string; stateSink?: StateSink; ramAsFile?: boolean; releaseVolumes?: boolean } & Pick<SnapshotOptions, "beforeSave" | "unhashed">;

/**
 * The host's snapshot store (`snapshots/<id>`) and what keeps its files alive: taking,
 * listing, importing, verifying and deleting snapshots, template pins, and the collection
 * of what nothing references any more.
 */
export class SnapshotCatalog {
  constructor(
    private readonly layout: DataDirLayout,
    private readonly host: HostProfile,
    private readonly templates: TemplateStore,
    private readonly sandboxes: SandboxRegistry,
    private readonly pool: VmPool,
  ) {}

  /**
   * Takes a snapshot of a sandbox into the store. The sandbox keeps running, or with
   * `keepRunning: false` stays paused (a warm hibernate).
   */
  async take(sandboxId: string, opts: TakeSnapshotOptions = {}): Promise<SnapshotInfo> {
    const sbx = this.sandboxes.get(sandboxId);
    const id = this.newId(opts.id);
    const dir = this.layout.snapshot(id);
    // In tmpfs: each child maps it, and on disk every page the load touched would be written back.
    if (opts.ramAsFile) privateDir(this.layout.ramDir);
    try {
      const r = await sbx.snapshot(dir, {
        id, keepRunning: opts.keepRunning ?? true, ...(opts.ignoreShared === false ? { ignoreShared: false } : {}), ...(opts.stateSink ? { stateSink: opts.stateSink } : {}),
        ...(opts.ramAsFile ? { ramFile: this.layout.ramFile(id) } : {}),
        ...(opts.releaseVolumes ? { releaseVolumes: true } : {}),
        ...(opts.beforeSave ? { beforeSave: opts.beforeSave } : {}),
        ...(opts.unhashed ? { unhashed: true } : {}),
      });
      return { id, dir, manifest: r.manifest };
    } catch (e) {
      await rm(dir, { recursive: true, force: true });
      throw e;
    }
  }

  /** A caller-chosen snapshot id (a control plane records it first), or a new one. */
  private newId(id?: string): string {
    if (id === undefined) return newId("snap");
    if (!/^snap_[a-z2-7]{16}$/.test(id)) throw new DenError("invalid_argument", `not a snapshot id: ${JSON.stringify(id)}`);
    if (existsSync(this.layout.snapshot(id))) throw new DenError("already_exists", `snapshot ${id} already exists on this host`);
    return id;
  }

  /** Whether a complete (not deleted) local snapshot with this id exists. */
  has(id: string): boolean {
    return ID_PATTERN.test(id) && existsSync(join(this.layout.snapshot(id), "manifest.json")) && !existsSync(join(this.layout.snapshot(id), DELETED_MARKER));
  }

  async get(id: string): Promise<SnapshotInfo> {
    if (typeof id !== "string" || !ID_PATTERN.test(id)) throw new DenError("snapshot_not_found", `snapshot ${JSON.stringify(id)} does not exist`);
    const dir = this.layout.snapshot(id);
    if (!existsSync(join(dir, "manifest.json")) || existsSync(join(dir, DELETED_MARKER))) throw new DenError("snapshot_not_found", `snapshot ${id} does not exist`);
    return { id, dir, manifest: await readManifest(dir) };
  }

  async list(): Promise<SnapshotInfo[]> {
    const out: SnapshotInfo[] = [];
    for (const id of readdirSync(this.layout.snapshots)) {
      try {
        out.push(await this.get(id));
      } catch {
        // half-written or deleted
      }
    }
    return out;
  }

  /** Deletes a snapshot. Its disk stays while sandboxes restored from it still use it. */
  async delete(id: string): Promise<void> {
    const snap = await this.get(id);
    await writeFile(join(snap.dir, DELETED_MARKER), "");
    // Sandboxes restored from it keep their mapping of memory.bin; the name can go.
    await rm(join(snap.dir, TEMPLATE_FILES.state), { force: true });
    await rm(join(snap.dir, TEMPLATE_FILES.memory), { force: true });
    await rm(this.layout.ramFile(id), { force: true });
    await this.gc();
  }

  /**
   * Imports a snapshot directory from elsewhere (another host, a download): verifies
   * every checksum and the host's compatibility before anything is copied in. `owned`:
   * the files were just checked against their checksums by the caller (a download from
   * the store), and the directory is the caller's to give away, so they are moved in, not
   * copied and hashed again.
   */
  async import(srcDir: string, opts: { owned?: boolean; absent?: string[] } = {}): Promise<SnapshotInfo> {
    const m = await readManifest(srcDir);
    // Files it names but does not have: only a caller's own, who feeds them to its restore.
    if (opts.absent?.length && !opts.owned) throw new DenError("invalid_argument", "only an owned import may leave files out");
    if (!opts.owned) await verifySnapshot(srcDir, m);
    checkCompatible(m, this.host);
    if (!this.templates.has(m.template)) throw new DenError("template_not_found", `snapshot needs template ${m.template.name}@${m.template.version}, which is not on this host`);
    const id = newId("snap");
    const dir = this.layout.snapshot(id);
    const staging = `${dir}.import`;
    try {
      await mkdir(staging, { recursive: true });
      for (const name of Object.keys(m.files)) {
        if (opts.absent?.includes(name)) continue;
        if (opts.owned) await rename(join(srcDir, name), join(staging, name));
        else await cp(join(srcDir, name), join(staging, name));
      }
      // Its disk's backing file is this host's copy of the template: only the disk changes
      // (and not even it when it names that file already: a snapshot of this host's).
      const backing = join(this.templates.dir(m.template), TEMPLATE_FILES.disk);
      const disk = join(staging, TEMPLATE_FILES.disk);
      let files = m.files;
      if (await renameBacking(disk, backing)) {
        files = { ...files, ...(await digestFiles(staging, [TEMPLATE_FILES.disk])) };
      }
      await writeManifest(staging, { ...m, id, files });
      await rename(staging, dir);
    } catch (e) {
      await rm(staging, { recursive: true, force: true });
      throw e;
    }
    return { id, dir, manifest: await readManifest(dir) };
  }

  /** Verifies a stored snapshot's checksums (after a download, before a wake). */
  async verify(id: string): Promise<void> {
    const s = await this.get(id);
    await verifySnapshot(s.dir, s.manifest);
  }

  /**
   * Keeps a template version alive for something this host cannot see (a snapshot in
   * the store of a cold-hibernated sandbox): `holder` names it, `unpinTemplate` lets go.
   */
  async pinTemplate(holder: string, ref: TemplateRef): Promise<void> {
    if (!ID_PATTERN.test(holder)) throw new DenError("invalid_argument", `invalid pin holder ${JSON.stringify(holder)}`);
    await mkdir(this.layout.pins, { recursive: true });
    await writeFile(join(this.layout.pins, holder), `${ref.name}@${ref.version}\n`);
  }

  /** Who holds template pins (see `pinTemplate`). */
  pinHolders(): string[] {
    return existsSync(this.layout.pins) ? readdirSync(this.layout.pins) : [];
  }

  async unpinTemplate(holder: string): Promise<void> {
    if (!ID_PATTERN.test(holder)) return;
    await rm(join(this.layout.pins, holder), { force: true });
    await this.gc();
  }

  /** Removes deleted snapshots and old template versions that nothing references. */
  async gc(): Promise<void> {
    const snapRefs = new Set<string>();
    const tplRefs = new Set<string>();
    const pins = this.layout.pins;
    if (existsSync(pins)) for (const f of readdirSync(pins)) tplRefs.add(readFileSync(join(pins, f), "utf8").trim());
    for (const s of this.sandboxes.list()) {
      if (s.state === "destroyed") continue;
      if (s.info.backingSnapshot) snapRefs.add(s.info.backingSnapshot);
      tplRefs.add(`${s.info.template.name}@${s.info.template.version}`);
    }
    for (const t of await this.templates.list()) if (t.manifest.baseTemplate) tplRefs.add(`${t.manifest.baseTemplate.name}@${t.manifest.baseTemplate.version}`);
    const root = this.layout.snapshots;
    for (const id of readdirSync(root)) {
      const dir = join(root, id);
      // Snapshots still being written have no manifest yet; the open sweeps abandoned ones (adoption.ts).
      if (!existsSync(join(dir, "manifest.json"))) continue;
      if (existsSync(join(dir, DELETED_MARKER)) && !snapRefs.has(id)) {
        await rm(dir, { recursive: true, force: true });
        continue;
      }
      try {
        const m = await readManifest(dir);
        tplRefs.add(`${m.template.name}@${m.template.version}`);
      } catch {
        // unreadable manifest: leave it for an operator
      }
    }
    await this.templates.gc(tplRefs);
    this.pool.retain((shape) => existsSync(shape.source));
  }
}
