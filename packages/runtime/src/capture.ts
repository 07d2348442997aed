import { copyFile, mkdir, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import type { HostProfile } from "./host.js";
import { VM_FILES, isAlive } from "./qemu.js";
import type { SnapshotCatalog, SnapshotInfo } from "./snapshot-catalog.js";
import type { SnapshotManifest, TemplateRef } from "./snapshot.js";
import { TEMPLATE_FILES, type TemplateStore } from "./templates.js";
import { createOverlay, flattenImage } from "./image-tools.js";
import { Vm } from "./vm.js";
import { GUEST_MAC } from "./vm-specs.js";

/** What a capture works with. */
export interface CaptureScope {
  instance: string;
  host: HostProfile;
  templates: TemplateStore;
  snapshots: SnapshotCatalog;
}

/**
 * Captures a running sandbox into `dir` as a template's files: RAM as a file
 * (memory.bin), device state (state.bin), and its disk flattened into one standalone
 * image (disk.qcow2). The sandbox pauses only for its snapshot and keeps running.
 */
export async function captureSandbox(s: CaptureScope, sandboxId: string, dir: string, opts: { flattenDisk: boolean }): Promise<{ template: TemplateRef; vm: SnapshotManifest["vm"]; pauseMs: number }> {
  const snap = await s.snapshots.take(sandboxId, { ignoreShared: false });
  try {
    await streamToRamFile(s, snap, join(dir, TEMPLATE_FILES.memory), join(dir, TEMPLATE_FILES.state));
    // The snapshot's disk is an overlay on its template's disk: keep it so (small), or
    // flatten it into one standalone image when the chain would get long.
    if (opts.flattenDisk) await flattenImage(snapshotChain(s, snap), join(dir, TEMPLATE_FILES.disk));
    else await rename(join(snap.dir, TEMPLATE_FILES.disk), join(dir, TEMPLATE_FILES.disk));
    return { template: snap.manifest.template, vm: snap.manifest.vm, pauseMs: snap.manifest.pauseMs };
  } finally {
    await s.snapshots.delete(snap.id);
  }
}

/** A snapshot's disk and those under it, top first (a snapshot's disk sits on its template's: sandbox-snapshot.ts). */
function snapshotChain(s: CaptureScope, snap: SnapshotInfo): string[] {
  return [join(snap.dir, TEMPLATE_FILES.disk), ...s.templates.diskChain(snap.manifest.template)];
}

/**
 * Loads a snapshot's migration stream (taken with `ignoreShared: false`) into a paused
 * helper QEMU whose RAM is the shared file `ramPath`, then saves only its device state
 * to `stateOut`: together they are the snapshot with its RAM as a file.
 */
async function streamToRamFile(s: CaptureScope, snap: SnapshotInfo, ramPath: string, stateOut: string): Promise<void> {
  const helperDir = join(snap.dir, "helper");
  await mkdir(helperDir);
  try {
    await createOverlay(snapshotChain(s, snap), join(helperDir, VM_FILES.disk));
    // A stream of only the changed pages goes over the template's RAM (the snapshots taken
    // for this carry every page; a checkpoint would not).
    if (snap.manifest.changedPagesOnly) await copyFile(join(s.templates.dir(snap.manifest.template), TEMPLATE_FILES.memory), ramPath);
    const vm = await Vm.launch({
      dir: helperDir, vcpus: snap.manifest.vm.vcpus, memoryMb: snap.manifest.vm.memoryMb,
      memoryFile: ramPath, shareMemory: true, disk: join(helperDir, VM_FILES.disk),
      backing: snapshotChain(s, snap),
      incoming: true, incomingState: join(snap.dir, TEMPLATE_FILES.state), macAddress: GUEST_MAC, tag: { instance: s.instance, sandbox: snap.id },
    }, s.host);
    try {
      // The stream carries every page: load it into the shared file, then save all but the RAM.
      await vm.setIgnoreShared(false);
      await vm.loadState(join(snap.dir, TEMPLATE_FILES.state));
      await vm.setIgnoreShared(true);
      await vm.saveState(stateOut);
    } catch (e) {
      // What QEMU said before it went (a helper killed mid-load says nothing over QMP).
      const log = await readFile(join(helperDir, VM_FILES.log), "utf8").catch(() => "");
      throw new DenError("qemu_error", `the fork's RAM-sharing helper failed: ${(e as Error).message}${(e as NodeJS.ErrnoException).code ? ` (${(e as NodeJS.ErrnoException).code})` : ""}; its QEMU ${isAlive(vm.pid) ? "was running" : "had exited"}; qemu.log: ${log.slice(-600).trim() || "(empty)"}`, undefined, { cause: e });
    } finally {
      await vm.kill();
    }
  } finally {
    await rm(helperDir, { recursive: true, force: true });
  }
}
