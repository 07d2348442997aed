/**
 * Sandbox snapshots moving between this host and the store: a VM's cold hibernation and
 * checkpoints up (its template version pinned here meanwhile), stored snapshots down and
 * restored, each reporting its progress.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { canStreamStoredFile, downloadSnapshot, faultPoint, manifestBytes, putSnapshotFile, putSnapshotFileFromFd, readStoredManifest, storedDigests, streamCompression, streamStoredFile, uploadSnapshot, type ObjectStore, type PutObject, type TransferProgress } from "@den/store";
import type { host } from "@den/protocol";
import { TEMPLATE_FILES, type Runtime, type SnapshotInfo, type StateSink, type VolumeRequest } from "@den/runtime";
import type { Admission } from "../admission.js";
import { throttled } from "../transfer-progress.js";
import { runtimeManifestOf } from "./stored-manifest.js";
import { sandboxInfo } from "./vm-info.js";
import type { WarmSnapshots } from "./warm-snapshots.js";

/** Where downloads are staged in the data dir (a start removes those a crash left). */
export const DOWNLOAD_PREFIX = "download-";

export class Transfers {
  constructor(
    private readonly rt: Runtime,
    private readonly store: ObjectStore,
    private readonly admission: Admission,
    private readonly warm: WarmSnapshots,
    /** Who hears of progress (the agent's `onTransfer`, read at each report). */
    private readonly listener: () => ((t: host.TransferEvent) => void) | undefined,
  ) {}

  private progress(sandbox: string, snapshot: string, direction: host.TransferEvent["direction"]): (p: TransferProgress) => void {
    return throttled((p) => this.listener()?.({
      sandbox, snapshot, direction, file: p.key.slice(p.key.lastIndexOf("/") + 1), bytes: p.bytes, total: p.total ?? null,
      done: p.total !== undefined && p.bytes >= p.total,
    }));
  }

  /**
   * Downloads a stored snapshot, verifies it, and restores it as sandbox `id`. Its manifest
   * is checked against `snapshot.digests` (the control plane's record of its upload) before
   * it is parsed, then every field of it and of the runtime's manifest in it; each object is
   * checked against the manifest's sha256 as it downloads, before anything reads it.
   * Without digests (a copy recorded before they were), the store's manifest is all there is
   * to go by: its fields are still checked.
   */
  async restoreStored(id: string, snapshot: host.StoredRef, volumes: VolumeRequest[] = []): Promise<host.HostSandboxInfo> {
    const stored = await readStoredManifest(this.store, snapshot.key, snapshot.digests);
    const manifest = runtimeManifestOf(stored, `stored snapshot ${snapshot.id}`);
    // Room first: a wake that cannot fit fails before it downloads anything.
    const release = this.admission.reserve(id, manifest.vm);
    const staging = await mkdtemp(join(this.rt.dataDir, DOWNLOAD_PREFIX));
    // The saved state (most of the bytes) is decompressed into a file in the sandbox's
    // directory while its QEMU starts, and loaded once it is checked; the rest (its disk) is
    // downloaded first. Older gzip objects download with the rest.
    const streamed = canStreamStoredFile(stored, TEMPLATE_FILES.state) ? [TEMPLATE_FILES.state] : [];
    const progress = this.progress(id, snapshot.id, "download");
    try {
      await downloadSnapshot(this.store, snapshot.key, staging, progress, stored, { except: streamed });
      faultPoint("wake-cold-after-download");
      // Checked object by object while downloading: moved in, not hashed again.
      const local = await this.rt.importSnapshot(staging, { owned: true, absent: streamed });
      try {
        const feed = streamed.length ? (fd: number) => streamStoredFile(this.store, stored, TEMPLATE_FILES.state, fd, progress) : undefined;
        // The downloaded snapshot is deleted below: its disk becomes the sandbox's own.
        return sandboxInfo(await this.rt.restore(local.id, { id, adoptDisk: true, ...(volumes.length ? { volumes } : {}) }, feed));
      } finally {
        // (Its disk lives on as the sandbox's.)
        await this.rt.deleteSnapshot(local.id);
      }
    } finally {
      release();
      await rm(staging, { recursive: true, force: true });
    }
  }

  /** A checkpoint: a snapshot of the running VM, stored, then dropped here. */
  async checkpoint(id: string, to: host.StoredRef): Promise<{ pauseMs: number; storedBytes: number; digests: host.StoredDigests }> {
    const snap = await this.rt.snapshot(id);
    try {
      const stored = await this.toStore(snap, id, to);
      return { pauseMs: snap.manifest.pauseMs, storedBytes: manifestBytes(stored), digests: storedDigests(stored) };
    } finally {
      await this.rt.deleteSnapshot(snap.id);
    }
  }

  /** Cold, the first half (HostVms.upload): the VM's snapshot, or its warm one, to the store. */
  async upload(id: string, to: host.StoredRef, warmSnapshot?: string): Promise<{ storedBytes: number; heldVolumes?: string[]; digests: host.StoredDigests }> {
    const sbx = this.rt.has(id) ? this.rt.get(id) : undefined;
    const alive = sbx?.vmAlive() ?? false;
    // A warm VM with volumes still mounts them all (its warm snapshot was taken so): while
    // its QEMU is there, it lets go of them now in a snapshot of its own, as from running.
    const release = alive && !!sbx!.info.volumes?.length;
    // Else a warm snapshot still being written is the one to store; one that never got
    // written (cancelled, failed) is replaced by a snapshot of the paused VM.
    if (release) await this.warm.cancel(id);
    else await this.warm.written(id);
    const fromWarm = warmSnapshot && !release && (this.rt.hasSnapshot(warmSnapshot) || !alive) ? warmSnapshot : undefined;
    // (A warm one stays paused if the move fails.)
    const wasRunning = sbx?.state === "running";
    // From warm, the snapshot taken when it paused is the one to store (nothing ran since,
    // and the VM may even be gone). From running, a snapshot leaves the VM paused.
    const uploaded: Record<string, PutObject> = {};
    let snap: SnapshotInfo;
    try {
      snap = fromWarm ? await this.rt.getSnapshot(fromWarm) : await this.rt.snapshot(id, { keepRunning: false, stateSink: this.stateSink(id, to, uploaded), releaseVolumes: true });
    } catch (e) {
      // The store failing mid-stream fails the snapshot, which left the VM paused: resume it.
      if (wasRunning) await sbx?.resume().catch(() => undefined);
      throw e;
    }
    faultPoint("hibernate-cold-after-snapshot");
    try {
      const stored = await this.toStore(snap, id, to, uploaded);
      // What the guest still has mounted in the stored state (not stale): the wake puts them back in their slots.
      const heldVolumes = (snap.manifest.volumes ?? []).filter((v) => !v.stale).map((v) => v.volume);
      return { storedBytes: manifestBytes(stored), ...(heldVolumes.length ? { heldVolumes } : {}), digests: storedDigests(stored) };
    } catch (e) {
      // Nothing is lost: the VM is still there, paused; put it back to work.
      if (wasRunning) await sbx?.resume().catch(() => undefined);
      throw e;
    } finally {
      // A snapshot taken for the upload is of no use after it, either way.
      if (!fromWarm) await this.rt.deleteSnapshot(snap.id).catch(() => undefined);
    }
  }

  /**
   * From running, a VM's saved state goes into the store as QEMU writes it (compressed on
   * the way, no state file on this host); the rest of the snapshot follows. What it put is
   * recorded in `uploaded`.
   */
  private stateSink(id: string, to: host.StoredRef, uploaded: Record<string, PutObject>): StateSink {
    const progress = this.progress(id, to.id, "upload");
    const streamTo: StateSink = async (source) => {
      uploaded[TEMPLATE_FILES.state] = await putSnapshotFile(this.store, to.key, TEMPLATE_FILES.state, source, progress);
    };
    // Or compressed on its way from QEMU by the runtime's native filter, as the store would.
    const packed = streamCompression();
    if (packed) {
      streamTo.compressed = {
        command: packed.command,
        ...(packed.zstdLevel ? { zstdLevel: packed.zstdLevel } : {}),
        put: async (source) => void (uploaded[TEMPLATE_FILES.state] = await putSnapshotFile(this.store, to.key, TEMPLATE_FILES.state, source, progress, { compressed: packed.compression })),
      };
      // A local store takes the filter's output straight into its file.
      if (this.store.putFromFd) {
        streamTo.compressed.putTo = async (write) => {
          uploaded[TEMPLATE_FILES.state] = await putSnapshotFileFromFd(this.store, to.key, TEMPLATE_FILES.state, packed.compression, write, progress)!;
        };
      }
    }
    return streamTo;
  }

  /**
   * Uploads a local snapshot to the store, pinning its template version on this host
   * (the stored copy needs it to restore); a failed upload leaves no pin behind.
   */
  private async toStore(snap: SnapshotInfo, sandbox: string, to: host.StoredRef, uploaded: Record<string, PutObject> = {}) {
    await this.rt.pinTemplate(to.id, snap.manifest.template);
    try {
      // The runtime hashed the files when it took the snapshot: the upload reuses those sums.
      return await uploadSnapshot(this.store, to.key, snap.dir, Object.keys(snap.manifest.files), snap.manifest, this.progress(sandbox, to.id, "upload"), snap.manifest.files, uploaded);
    } catch (e) {
      await this.rt.unpinTemplate(to.id);
      throw e;
    }
  }
}
