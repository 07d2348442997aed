import { existsSync } from "node:fs";
import { mkdir, open, rm } from "node:fs/promises";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import type { Launcher, LauncherScope } from "./launcher.js";
import type { PoolShape, PooledVm } from "./pool.js";
import { POOL_TAG_PREFIX, VM_FILES } from "./qemu.js";
import type { Sandbox } from "./sandbox.js";
import type { SnapshotInfo } from "./snapshot-catalog.js";
import { TEMPLATE_FILES } from "./templates.js";
import { newId } from "./util.js";
import { Vm } from "./vm.js";
import { restoreSpec } from "./vm-specs.js";
import type { VolumeRequest } from "./volumes.js";

export interface ForkOptions {
  ids?: string[];
  volumes?: VolumeRequest[];
  reached?: (point: string) => void;
}

/** What a fork works with: the launcher's stores, pool and sandbox map (it snapshots the parent), and the launcher (it restores each child). */
export type ForkScope = Omit<LauncherScope, "networks" | "context"> & { launcher: Launcher };

/** Forks running sandboxes: a snapshot of the parent that its children restore, sharing its RAM where they can. */
export class Forker {
  constructor(private readonly s: ForkScope) {}

  /** Forks a running sandbox into `count` new, independent sandboxes; see `Runtime.fork`. */
  async fork(sandboxId: string, count = 1, opts: ForkOptions = {}): Promise<Sandbox[]> {
    if (!Number.isInteger(count) || count < 1 || count > 16) throw new DenError("invalid_argument", "fork count must be an integer in 1..16");
    if (opts.ids && opts.ids.length !== count) throw new DenError("invalid_argument", "fork: one id per child");
    const parent = this.s.sandboxes.get(sandboxId);
    // Children of one fork share its RAM; a single child has nothing to share it with and
    // restores straight from the stream, which is several times faster under TCG.
    if (count > 1) {
      try {
        return await this.forkFrom(parent, count, true, opts);
      } catch (e) {
        if (e instanceof DenError && e.status < 500) throw e;
        // Sharing is an optimisation: the children can each load the whole stream instead
        // (the parent kept running; what the failed attempt made is gone).
        process.emitWarning(`fork of ${sandboxId}: sharing the children's RAM failed (${(e as Error).message}); each child loads its own copy`, "DenForkWarning");
      }
    }
    return this.forkFrom(parent, count, false, opts);
  }

  private async forkFrom(parent: Sandbox, count: number, shared: boolean, opts: ForkOptions): Promise<Sandbox[]> {
    // Children that each load the stream start their QEMUs while the parent's state is saved
    // (not with volumes: those QEMUs are spawned with their slots empty; nor for a parent
    // whose RAM is a file, which its snapshot copies after the state).
    const early: Array<Promise<PooledVm | undefined>> = [];
    const launchEarly = !shared && !opts.volumes?.length && !parent.info.volumes?.length && !parent.info.ramFile;
    const beforeSave = (dir: string, diskReady: Promise<void>) => {
      for (let i = 0; i < count; i++) early.push(this.launchChild(parent, dir, diskReady).catch(() => undefined));
    };
    // Shared: the parent's RAM becomes a file the children map (where the kernel cannot say
    // which pages the parent changed, the snapshot is a stream each child loads).
    let snap: SnapshotInfo;
    try {
      snap = await this.s.snapshots.take(parent.id, { unhashed: true, ...(shared ? { ramAsFile: true } : launchEarly ? { beforeSave } : {}) });
    } catch (e) {
      await Promise.all(early.map(async (p) => { const vm = await p; if (vm) await this.s.pool.discard(vm); }));
      throw e;
    }
    if (early.length) {
      await Promise.all(early);
      // The parent's state saved, its children's QEMUs started, none of them a sandbox's yet.
      opts.reached?.("fork-children-started");
    }
    try {
      const children: Sandbox[] = [];
      const results = await Promise.allSettled(Array.from({ length: count }, async (_, i) => this.s.launcher.restore(snap.id, { pidsMax: parent.info.pidsMax, ...(opts.ids ? { id: opts.ids[i]! } : {}), ...(opts.volumes?.length ? { volumes: opts.volumes } : {}) }, undefined, await early[i])));
      for (const r of results) if (r.status === "fulfilled") children.push(r.value);
      // A child whose restore failed before it took its QEMU left that one in the pool's directory.
      await Promise.all(early.map(async (p, i) => {
        const vm = await p;
        if (vm && results[i]!.status === "rejected" && existsSync(vm.dir)) await this.s.pool.discard(vm);
      }));
      const failed = results.find((r) => r.status === "rejected");
      if (failed) {
        await Promise.all(children.map((c) => c.destroy()));
        throw (failed as PromiseRejectedResult).reason;
      }
      if (snap.manifest.memory === "file") await digHolesLater(this.s.layout.ramFile(snap.id));
      return children;
    } finally {
      // The fork's snapshot is internal: its disk lives on while children use it.
      await this.s.snapshots.delete(snap.id);
    }
  }

  /**
   * A fork child's QEMU, started from the snapshot's directory while the parent's state is
   * still being saved into it: spawned as the pool spawns (its directory and tag the pool's,
   * so a kill before a sandbox claims it leaves nothing the next open does not remove), it
   * loads the state once the snapshot is complete.
   */
  private async launchChild(parent: Sandbox, snapDir: string, diskReady: Promise<void>): Promise<PooledVm> {
    const id = newId(POOL_TAG_PREFIX.slice(0, -1));
    const dir = join(this.s.pool.root, id);
    const stateFile = join(snapDir, TEMPLATE_FILES.state);
    const { vcpus, memoryMb, template } = parent.info;
    const shape: PoolShape = {
      source: snapDir, memoryFile: join(this.s.templates.dir(template), TEMPLATE_FILES.memory), stateFile,
      backing: [join(snapDir, TEMPLATE_FILES.disk), ...this.s.templates.diskChain(template)], vcpus, memoryMb,
    };
    try {
      await mkdir(dir, { recursive: true });
      await diskReady;
      await this.s.overlays.create(shape.backing, join(dir, VM_FILES.disk));
      const vm = await Vm.launch(restoreSpec(this.s.layout.instance, dir, id, shape, { incomingState: stateFile }), this.s.host, { console: false });
      return { id, dir, shape, vm, pendingState: stateFile };
    } catch (e) {
      await rm(dir, { recursive: true, force: true });
      throw e;
    }
  }
}

/**
 * Frees the zero pages that loading put into a fork's RAM file, in the background: the
 * children map them unchanged (zero either way), so they need not wait. The open file
 * outlives the snapshot's deletion.
 */
async function digHolesLater(ramPath: string): Promise<void> {
  const fh = await open(ramPath, "r+").catch(() => undefined);
  if (!fh) return;
  const child = spawn("fallocate", ["--dig-holes", "/dev/fd/3"], { stdio: ["ignore", "ignore", "ignore", fh.fd] });
  child.on("error", () => undefined);
  child.on("close", () => void fh.close().catch(() => undefined));
}
