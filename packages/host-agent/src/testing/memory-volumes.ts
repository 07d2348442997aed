/**
 * Volume images of an in-memory host: each a file tree of its own (a filesystem of its
 * size) that the guests mounting it share, with a fake inode that changes whenever the
 * image is replaced (a create or a fetch), as a real image file's does.
 */
import { DenError, api } from "@den/protocol";
import { deserializeDir, dir, serializeTree, type Filesystem, type FsWatch, type SerialNode } from "./memory-fs.js";

/** A volume's id (the real host's VOLUME_ID). */
const VOLUME_ID = /^vol_[a-z2-7]{16}$/;
const MIB = 1024 * 1024;

export interface VolumeImage {
  id: string;
  sizeMb: number;
  fs: Filesystem;
  inode: number;
}

/** A volume as a stored snapshot carries it. */
export interface SerialVolume {
  format: "den-memory-volume/1";
  id: string;
  sizeMb: number;
  files: SerialNode;
}

export class MemoryVolumes {
  private readonly images = new Map<string, VolumeImage>();
  /** The inode the next image gets. */
  nextInode = 4096;

  /** `watch`: what each image's filesystem tells of its changes (the host's state file). */
  constructor(private readonly now: () => number, private readonly watch?: (id: string) => FsWatch) {}

  check(id: string): void {
    if (!VOLUME_ID.test(id)) throw new DenError("invalid_argument", `not a volume id: ${JSON.stringify(id.slice(0, 100))}`);
  }

  has(id: string): boolean {
    this.check(id);
    return this.images.has(id);
  }

  get(id: string): VolumeImage {
    this.check(id);
    const v = this.images.get(id);
    if (!v) throw new DenError("volume_not_found", `volume ${id} has no image on this host`);
    return v;
  }

  /** An empty filesystem of `sizeMb`; one already here is kept, whatever was written to it. */
  create(id: string, sizeMb: number): void {
    this.check(id);
    if (this.images.has(id)) return;
    if (!Number.isInteger(sizeMb) || sizeMb < api.API_LIMITS.minVolumeMb || sizeMb > api.API_LIMITS.maxVolumeMb) {
      throw new DenError("invalid_argument", `a volume's size must be a whole number of MiB in ${api.API_LIMITS.minVolumeMb}..${api.API_LIMITS.maxVolumeMb}`);
    }
    this.put(id, sizeMb, { root: dir(this.now()), limitBytes: sizeMb * MIB });
  }

  /** Grows its filesystem (a helper VM's online resize). */
  grow(id: string, sizeMb: number): void {
    const v = this.get(id);
    if (!Number.isInteger(sizeMb) || sizeMb < 16 || sizeMb > api.API_LIMITS.maxVolumeMb) throw new DenError("invalid_argument", `a volume's size must be a whole number of MiB in 16..${api.API_LIMITS.maxVolumeMb}`);
    v.sizeMb = Math.max(v.sizeMb, sizeMb);
    v.fs.limitBytes = v.sizeMb * MIB;
  }

  remove(id: string): void {
    this.check(id);
    this.images.delete(id);
  }

  list(): Array<{ id: string; inode: number }> {
    return [...this.images.values()].map((v) => ({ id: v.id, inode: v.inode }));
  }

  serialize(id: string): SerialVolume {
    const v = this.get(id);
    return { format: "den-memory-volume/1", id, sizeMb: v.sizeMb, files: serializeTree(v.fs.root) };
  }

  /** Makes the stored copy this host's image of `id`, in place of any other (a new inode). */
  restore(id: string, s: SerialVolume): void {
    this.check(id);
    if (s.format !== "den-memory-volume/1") throw new DenError("snapshot_corrupt", `stored volume ${id} is not an in-memory host's volume`);
    this.put(id, s.sizeMb, { root: deserializeDir(s.files), limitBytes: s.sizeMb * MIB });
  }

  /** Puts back an image as a state file kept it, inode and all. */
  load(s: SerialVolume & { inode: number }): void {
    this.put(s.id, s.sizeMb, { root: deserializeDir(s.files), limitBytes: s.sizeMb * MIB }, s.inode);
  }

  private put(id: string, sizeMb: number, fs: Filesystem, inode = this.nextInode++): void {
    if (this.watch) fs.watch = this.watch(id);
    this.images.set(id, { id, sizeMb, fs, inode });
  }
}
