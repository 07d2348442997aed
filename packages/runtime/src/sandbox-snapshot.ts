import { copyFile, mkdir, rm, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { VM_FILES } from "./qemu.js";
import { digestFiles, hostSection, writeManifest, type FileDigest, type SnapshotManifest } from "./snapshot.js";
import { runTool } from "./util.js";
import { rebaseImage } from "./image-tools.js";
import type { StateSink, Vm } from "./vm.js";
import { changedPages, copyChangedPages } from "./pagemap.js";
import type { PageFilterStats } from "./migration-stream.js";
import { RAM_FILE } from "./sandbox-record.js";
import type { SandboxCore } from "./sandbox-core.js";
import { mountVolumes, releaseVolumes, snapshotVolumes, type VolumeAttachment } from "./volumes.js";

export interface SnapshotOptions {
  id: string;
  keepRunning?: boolean;
  ignoreShared?: boolean;
  stateSink?: StateSink;
  ramFile?: string;
  /**
   * Called once the snapshot's disk is in `dir` and its state file exists (still empty),
   * before the state is saved into it: a fork starts its children's QEMUs meanwhile. Their
   * disks may overlay the snapshot's once `diskReady` resolves (a rebase may still be under way).
   */
  beforeSave?: (dir: string, diskReady: Promise<void>) => void;
  /** An internal snapshot (a fork's, gone once its children run): its state is not hashed. */
  unhashed?: boolean;
}

export interface SnapshotResult {
  dir: string;
  manifest: SnapshotManifest;
}

/**
 * A sandbox's snapshots: the VM paused only while its memory and disk overlay are copied,
 * its volumes let go of for a hibernation (and mounted again if it fails), its disk kept one
 * level above its template's, and a snapshot in progress cancellable.
 */
export class SandboxSnapshots {
  /** The snapshot in progress, if one is: its VM, and whether a cancel was asked of it. */
  private snapshotting: { vm: Vm; cancelled: boolean } | undefined;

  constructor(private readonly core: SandboxCore) {}

  /**
   * Writes a snapshot of the running VM into `dir`: the VM is paused only while its
   * memory and disk overlay are copied; hashing and the manifest come after it resumes.
   * `ramFile`: the guest's RAM is written to that file instead (its template's RAM with the
   * pages it changed over it, which the kernel names), and the state carries no page of it:
   * a fork's children map the file and share every page none of them writes. Where the
   * kernel cannot say (a VM whose RAM is not its template's), the snapshot is as without it.
   */
  take(dir: string, opts: SnapshotOptions & { releaseVolumes?: boolean } = { id: "" }): Promise<SnapshotResult> {
    return this.core.lifecycle.run(async () => {
      this.core.assertUsable();
      const vm = this.core.requireVm();
      // A hibernation lets go of the volumes it can, so others may use them meanwhile (a wake mounts them again).
      const released = opts.releaseVolumes ? await this.releaseVolumes(vm) : [];
      try {
        this.snapshotting = { vm, cancelled: false };
        return await this.snapshotNow(dir, vm, opts, released);
      } catch (e) {
        await this.remount(vm, released).catch(() => undefined);
        throw e;
      } finally {
        this.snapshotting = undefined;
      }
    });
  }

  /**
   * Stops a snapshot in progress (it fails, leaving nothing; the VM stays as it was): a
   * wake or destroy need not wait for a warm hibernation's local snapshot.
   */
  async cancel(): Promise<void> {
    if (!this.snapshotting) return;
    // Before QEMU's migration has begun a migrate_cancel does nothing: the flag stops it there.
    this.snapshotting.cancelled = true;
    await this.snapshotting.vm.qmp.execute("migrate_cancel").catch(() => undefined);
  }

  private async snapshotNow(dir: string, vm: Vm, opts: SnapshotOptions, released: VolumeAttachment[]): Promise<SnapshotResult> {
    const wasRunning = this.core.record.state === "running";
    await mkdir(dir, { recursive: true });
    const agent = wasRunning ? await this.core.agent() : undefined;
    await agent?.quiesce();
    const t0 = performance.now();
    let pauseMs = 0;
    let changedOnly = false;
    let stateDigest: FileDigest | undefined;
    const filtered: PageFilterStats = { pages: 0, kept: 0, passedThrough: false, bytesIn: 0, bytesOut: 0 };
    const base = this.core.ctx.templateMemory(this.core.record.template);
    const bytes = this.core.record.memoryMb * 1024 * 1024;
    let asFile = false;
    // The template's part of the RAM file is copied before the pause (it never changes).
    const ramFile = opts.ramFile && !this.core.record.ramFile ? opts.ramFile : undefined;
    if (ramFile) await runTool("cp", ["--sparse=always", "--", base, ramFile]);
    try {
      if (wasRunning) await vm.stop();
      else if ((await vm.status()) === "postmigrate") {
        // QEMU will not migrate a VM a previous migration paused: let it take one breath.
        await vm.cont();
        await vm.stop();
      }
      // A stream is restored over its template's RAM: it need carry only the pages that differ
      // (not for a stream a helper loads into an empty RAM file: `ignoreShared: false`).
      changedOnly = !this.core.record.ramFile && opts.ignoreShared !== false && process.env.DEN_SNAPSHOT_ALL_PAGES !== "1";
      // Which pages it wrote, from the kernel, while it is stopped (undefined: compare instead).
      let changed = changedOnly || ramFile ? await changedPages(vm.pid, base, bytes) : undefined;
      if (ramFile && changed && (await copyChangedPages(vm.pid, base, bytes, changed, ramFile)) !== undefined) {
        // Every page is in the file: the stream keeps none of them.
        asFile = true;
        changedOnly = true;
        changed = new Uint8Array(changed.length);
      }
      // Before the state, for a fork whose children start their QEMUs while it is saved: the
      // disk (the stop flushed it, and nothing writes it until the VM runs again) and the
      // state's file (empty yet: a child opens it at its spawn and reads it once it is whole).
      let diskReady: Promise<void> | undefined;
      if (opts.beforeSave) {
        await copyFile(join(this.core.dir, VM_FILES.disk), join(dir, "disk.qcow2"));
        await writeFile(join(dir, "state.bin"), "");
        diskReady = this.rebaseOnTemplate(dir);
        diskReady.catch(() => undefined);
        opts.beforeSave(dir, diskReady);
      }
      // (With a sink, the state is the sink's: the manifest names it, the directory has no copy.)
      stateDigest = await vm.saveState(opts.stateSink ?? join(dir, "state.bin"), {
        cancelled: () => this.snapshotting?.cancelled === true,
        ...(opts.unhashed ? { unhashed: true } : {}),
        ignoreShared: this.core.record.ramFile ? true : opts.ignoreShared,
        ...(changedOnly ? { changedAgainst: base, stats: filtered } : {}),
        ...(changed ? { changed: { pages: changed, ramBytes: bytes } } : {}),
      });
      if (diskReady) await diskReady;
      else await copyFile(join(this.core.dir, VM_FILES.disk), join(dir, "disk.qcow2"));
      // Shared RAM is skipped by the migration (x-ignore-shared): it is the file itself.
      if (this.core.record.ramFile) await copyFile(join(this.core.dir, RAM_FILE), join(dir, "memory.bin"));
      // (Not hashed: such a snapshot is internal, gone once the children run.)
      if (asFile) await symlink(ramFile!, join(dir, "memory.bin"));
    } catch (e) {
      if (ramFile) await rm(ramFile, { force: true });
      throw e;
    } finally {
      if (ramFile && !asFile) await rm(ramFile, { force: true });
      if (wasRunning && opts.keepRunning !== false) {
        await vm.cont();
        pauseMs = performance.now() - t0;
        agent?.unhold();
        // Not waited for: the agent takes requests in order, so whatever is asked of the guest
        // next runs after its clock is set; a fork's children need not wait a round trip for it.
        void this.core.syncClock().catch(() => undefined);
      } else {
        pauseMs = performance.now() - t0;
        if (wasRunning) await this.core.setState("paused");
      }
    }
    if (!opts.beforeSave) await this.rebaseOnTemplate(dir);
    const manifest: SnapshotManifest = {
      format: 1,
      kind: "sandbox",
      id: opts.id,
      createdAt: new Date().toISOString(),
      template: this.core.record.template,
      memory: this.core.record.ramFile || asFile ? "file" : "stream",
      ...(changedOnly && !asFile ? { changedPagesOnly: true, pages: { total: filtered.pages, kept: filtered.kept } } : {}),
      host: hostSection(this.core.ctx.host),
      vm: { vcpus: this.core.record.vcpus, memoryMb: this.core.record.memoryMb, diskMb: this.core.record.diskMb },
      pauseMs: Math.round(pauseMs * 10) / 10,
      sourceSandbox: this.core.id,
      ...this.mountsToRecord(released),
      files: { "state.bin": stateDigest!, ...(await digestFiles(dir, this.core.record.ramFile ? ["disk.qcow2", "memory.bin"] : ["disk.qcow2"])) },
    };
    await writeManifest(dir, manifest);
    return { dir, manifest };
  }

  /** Keeps every snapshot's disk one level above the template's, so chains stay short. */
  private async rebaseOnTemplate(dir: string): Promise<void> {
    if (!this.core.record.backingSnapshot) return;
    const { template, backingSnapshot } = this.core.record;
    await rebaseImage(join(dir, "disk.qcow2"), this.core.ctx.diskBacking({ template, backingSnapshot }), this.core.ctx.diskBacking({ template }));
  }

  /** The manifest's `volumes`: what the guest still has mounted once `released` are not. */
  private mountsToRecord(released: VolumeAttachment[]): Pick<SnapshotManifest, "volumes"> {
    const mounted = (this.core.record.volumes ?? []).filter((v) => !released.includes(v));
    const all = snapshotVolumes(mounted, this.core.record.staleVolumes ?? []);
    return all.length ? { volumes: all } : {};
  }

  /** Releases the guest's volumes (a paused VM runs for it a moment); returns those it let go of. */
  private async releaseVolumes(vm: Vm): Promise<VolumeAttachment[]> {
    const volumes = this.core.record.volumes ?? [];
    if (!volumes.length) return [];
    return this.core.whileRunning(vm, (agent) => releaseVolumes(agent, volumes));
  }

  /** After a failed hibernation: the guest gets back the volumes it released. */
  private async remount(vm: Vm, released: VolumeAttachment[]): Promise<void> {
    if (released.length) await this.core.whileRunning(vm, (agent) => mountVolumes(agent, released));
  }
}
