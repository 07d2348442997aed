/** `HostVolumes` on this machine: images made, grown in a helper VM, moved through the store; once per operation id. */
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { downloadSnapshot, manifestBytes, readStoredManifest, storedDigests, uploadSnapshot, type ObjectStore } from "@den/store";
import { DenError, type host } from "@den/protocol";
import { createVolumeImage, newId, type Runtime } from "@den/runtime";
import type { OpJournal } from "../op-journal.js";
import { DOWNLOAD_PREFIX } from "./transfers.js";
import type { LocalVms } from "./vms.js";
import type { VolumeImages } from "./volume-images.js";

/** Where a helper VM mounts the volume it grows. */
const HELPER_MOUNT = "/mnt/den-volume";

export class LocalVolumes implements host.HostVolumes {
  constructor(
    private readonly rt: Runtime,
    private readonly store: ObjectStore,
    private readonly journal: OpJournal,
    private readonly imgs: VolumeImages,
    private readonly vms: LocalVms,
  ) {}

  images(): Promise<host.VolumeImage[]> {
    return this.imgs.list();
  }

  async dropImage(id: string, inode: number): Promise<boolean> {
    return this.imgs.drop(id, inode);
  }

  create(op: string, id: string, sizeMb: number): Promise<void> {
    return this.journal.once(op, async () => {
      const image = this.imgs.path(id);
      // Asked again (a retried create): the image made the first time is kept, whatever was written to it since.
      if (existsSync(image)) return;
      await createVolumeImage(image, sizeMb);
    });
  }

  async delete(id: string): Promise<void> {
    await rm(join(this.imgs.path(id), ".."), { recursive: true, force: true });
  }

  grow(op: string, id: string, sizeMb: number, helper: string): Promise<void> {
    return this.journal.once(op, async () => {
      // Grown by a guest (online ext4 resize) in a VM of its own, gone after.
      await this.vms.create(newId("op"), { id: helper, template: "base", volumes: [{ volume: id, path: HELPER_MOUNT, readOnly: false }] });
      try {
        await this.rt.get(helper).growVolume(id, sizeMb);
      } finally {
        await this.vms.destroy(helper);
      }
    });
  }

  /** (A copy already at `to` is replaced: the digests answered are of what this host put, not the store's word.) */
  park(op: string, id: string, to: host.StoredRef): Promise<{ storedBytes: number; digests: host.StoredDigests }> {
    return this.journal.once(op, async () => {
      const image = this.imgs.path(id);
      if (!existsSync(image)) throw new DenError("volume_not_found", `volume ${id} has no image on this host`);
      // A VM that has it in a slot may be writing it: the copy would be torn.
      const user = this.imgs.user(id);
      if (user) throw new DenError("volume_in_use", `volume ${id} is in a slot of VM ${user.id} on this host`);
      const stored = await uploadSnapshot(this.store, to.key, dirname(image), [basename(image)], { volume: id });
      return { storedBytes: manifestBytes(stored), digests: storedDigests(stored) };
    });
  }

  fetch(op: string, id: string, from: host.StoredRef): Promise<void> {
    return this.journal.once(op, async () => {
      const image = this.imgs.path(id);
      // Downloaded (and verified) beside the data dir's other downloads, then put in place in one rename.
      const staging = await mkdtemp(join(this.rt.dataDir, DOWNLOAD_PREFIX));
      try {
        // Checked against the digests its park recorded (without: the store's manifest, its fields checked).
        const stored = await readStoredManifest(this.store, from.key, from.digests);
        if (Object.keys(stored.files).join() !== basename(image)) throw new DenError("snapshot_corrupt", `stored volume ${from.id} is not one image`);
        await downloadSnapshot(this.store, from.key, staging, undefined, stored);
        await mkdir(dirname(image), { recursive: true });
        await rename(join(staging, basename(image)), image);
      } finally {
        await rm(staging, { recursive: true, force: true });
      }
    });
  }
}
