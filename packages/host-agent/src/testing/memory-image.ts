/**
 * What an in-memory host keeps in the object store, in the real host's layout (objects
 * under the snapshot's key, `store-manifest.json` last, every object hashed and checked on
 * the way back): a sandbox's state, a template or a volume, each as one small JSON file.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DenError, type host } from "@den/protocol";
import { STORE_MANIFEST, downloadSnapshot, readStoredManifest, uploadSnapshot, type ObjectStore, type StoredSnapshot, type TransferProgress } from "@den/store";
import type { GuestImage } from "./memory-guest.js";

/** The one file of a stored snapshot of an in-memory host. */
export const STATE_FILE = "memory-state.json";

/** A sandbox as a snapshot keeps it: its guest, and what it runs on. */
export interface SandboxImage {
  format: "den-memory-sandbox/1";
  template: { name: string; version: string };
  shape: { vcpus: number; memoryMb: number; diskMb: number };
  guest: GuestImage;
  /** Volumes its guest still has mounted (a warm snapshot's; a cold one's guest let go of them). */
  mounts: host.VolumeSpec[];
}

/** What a snapshot made here needs of the host it is restored on (the placement filter). */
export function memoryHostKind(): host.HostKind {
  return { qemuVersion: "in-memory", accelerator: "tcg", cpuModel: "in-memory", arch: process.arch };
}

/**
 * Wraps a store so that `beforeManifest` runs when a snapshot's manifest is about to be
 * written (its files are all up): the real host's `snapshot-upload-mid`.
 */
function beforeManifest(store: ObjectStore, hook: () => void): ObjectStore {
  return new Proxy(store, {
    get(target, key) {
      if (key === "putBytes") {
        return async (k: string, data: Buffer) => {
          if (k.endsWith(`/${STORE_MANIFEST}`)) hook();
          return target.putBytes(k, data);
        };
      }
      const v: unknown = Reflect.get(target, key, target);
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

/** Uploads `content` as a stored snapshot under `key`, with `manifest` as its runtime manifest. */
export async function putStored(store: ObjectStore, key: string, content: unknown, manifest: unknown, opts: { tmp: string; onProgress?: (p: TransferProgress) => void; midway?: () => void }): Promise<StoredSnapshot> {
  const dir = await mkdtemp(join(opts.tmp, "upload-"));
  try {
    await writeFile(join(dir, STATE_FILE), JSON.stringify(content));
    return await uploadSnapshot(opts.midway ? beforeManifest(store, opts.midway) : store, key, dir, [STATE_FILE], manifest, opts.onProgress);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Downloads (and verifies) the stored snapshot at `key` and returns its content. */
export async function getStored(store: ObjectStore, key: string, opts: { tmp: string; onProgress?: (p: TransferProgress) => void; manifest?: StoredSnapshot }): Promise<unknown> {
  const stored = opts.manifest ?? (await readStoredManifest(store, key));
  if (!stored.files[STATE_FILE]) {
    throw new DenError("snapshot_incompatible", `snapshot ${stored.id} cannot be restored on this host: it was not made by an in-memory host`, { problems: ["not an in-memory snapshot"] });
  }
  const dir = await mkdtemp(join(opts.tmp, "download-"));
  try {
    await downloadSnapshot(store, key, dir, opts.onProgress, stored);
    return JSON.parse(await readFile(join(dir, STATE_FILE), "utf8")) as unknown;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export function checkSandboxImage(v: unknown, id: string): SandboxImage {
  const s = v as Partial<SandboxImage> | undefined;
  if (s?.format !== "den-memory-sandbox/1" || !s.guest || !s.shape || !s.template) throw new DenError("snapshot_corrupt", `stored snapshot ${id} is not an in-memory sandbox's`);
  return s as SandboxImage;
}
