/** Volume images on this host's disk: where each lives, which VM has one in a slot, the sweep's view. */
import { existsSync, rmSync, statSync } from "node:fs";
import { readdir, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { DenError, type host } from "@den/protocol";
import { volumeImagePath, type Runtime, type Sandbox as VmSandbox, type VolumeRequest } from "@den/runtime";

/** A volume's id (its image's folder under the data dir's volumes/). */
const VOLUME_ID = /^vol_[a-z2-7]{16}$/;

export class VolumeImages {
  constructor(private readonly rt: Runtime) {}

  /** Volume `id`'s image file (checked to be a volume id: it names a path). */
  path(id: string): string {
    if (!VOLUME_ID.test(id)) throw new DenError("invalid_argument", `not a volume id: ${JSON.stringify(id.slice(0, 100))}`);
    return volumeImagePath(join(this.rt.dataDir, "volumes"), id);
  }

  /** Volumes to put in a VM, by their images on this host (each must have been made here). */
  requests(volumes: host.VolumeSpec[] | undefined): VolumeRequest[] {
    return (volumes ?? []).map((v) => {
      const image = this.path(v.volume);
      if (!existsSync(image)) throw new DenError("volume_not_found", `volume ${v.volume} has no image on this host`);
      return { volume: v.volume, image, path: v.path, readOnly: v.readOnly };
    });
  }

  /** A VM on this host that has volume `id` in a slot (it may be writing the image). */
  user(id: string): VmSandbox | undefined {
    return this.rt.list().find((s) => s.state !== "destroyed" && s.info.volumes?.some((v) => v.volume === id));
  }

  async list(): Promise<host.VolumeImage[]> {
    const out: host.VolumeImage[] = [];
    for (const id of await readdir(join(this.rt.dataDir, "volumes")).catch(() => [])) {
      if (!VOLUME_ID.test(id)) continue;
      const st = await stat(this.path(id)).catch(() => undefined);
      if (st) out.push({ id, inode: st.ino });
    }
    return out;
  }

  /** Removes the image if it is still file `inode` and no VM has it in a slot; whether it went. */
  drop(id: string, inode: number): boolean {
    const image = this.path(id);
    if (this.user(id)) return false;
    // (Synchronous from the check to the removal: a fetch's rename, on this event loop, cannot come between.)
    const st = statSync(image, { throwIfNoEntry: false });
    if (!st || st.ino !== inode) return false;
    rmSync(dirname(image), { recursive: true, force: true });
    return true;
  }
}
