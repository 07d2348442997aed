/**
 * What an in-memory host keeps in the object store, in the real host's layout (objects
 * under the snapshot's key, `store-manifest.json` last, every object hashed and checked on
 * the way back): a sandbox's state, a template or a volume, each as one small JSON file.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DenError, type StoredDigests, type host } from "@den/protocol";
import { isTemplateRef } from "@den/runtime";
import { STORE_MANIFEST, downloadSnapshot, readStoredManifest, uploadSnapshot, type ObjectStore, type StoredSnapshot, type TransferProgress } from "@den/store";
import type { GuestImage } from "./memory-guest.js";
import type { TemplateRef } from "./memory-templates.js";

/** A VM's shape, as a snapshot keeps it. */
type Shape = SandboxImage["shape"];

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

/**
 * Downloads (and verifies) the stored snapshot at `key` and returns its content: its manifest
 * (`manifest`, or read here) checked against `digests` where the control plane recorded them.
 */
export async function getStored(store: ObjectStore, key: string, opts: { tmp: string; onProgress?: (p: TransferProgress) => void; manifest?: StoredSnapshot; digests?: StoredDigests | undefined }): Promise<unknown> {
  const stored = opts.manifest ?? (await readStoredManifest(store, key, opts.digests));
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
  if (s?.format !== "den-memory-sandbox/1" || !s.guest || !isShape(s.shape) || !isTemplateRef(s.template)) throw new DenError("snapshot_corrupt", `stored snapshot ${id} is not an in-memory sandbox's`);
  return s as SandboxImage;
}

/**
 * The fields of a stored snapshot's runtime manifest this host uses (its template and its VM's
 * shape), each checked before use as the real host checks all of its (runtime's checkManifest).
 */
export function checkMemoryManifest(v: unknown, id: string): { kind: string; template: TemplateRef; vm: Shape } {
  const m = v as { kind?: unknown; template?: unknown; vm?: unknown } | null;
  if (typeof m !== "object" || m === null || (m.kind !== "sandbox" && m.kind !== "template")) throw new DenError("snapshot_corrupt", `stored snapshot ${id}: its manifest has no kind`);
  if (!isTemplateRef(m.template)) throw new DenError("snapshot_corrupt", `stored snapshot ${id}: its manifest's template ${String(JSON.stringify(m.template)).slice(0, 200)} is not a template's name and version`);
  if (!isShape(m.vm)) throw new DenError("snapshot_corrupt", `stored snapshot ${id}: its manifest has no VM shape`);
  return { kind: m.kind, template: m.template, vm: m.vm };
}

const isCount = (v: unknown, max: number) => typeof v === "number" && Number.isSafeInteger(v) && v >= 1 && v <= max;
const isShape = (v: unknown): v is Shape => {
  const s = v as Partial<Shape> | null;
  return typeof s === "object" && s !== null && isCount(s.vcpus, 1024) && isCount(s.memoryMb, 1 << 24) && isCount(s.diskMb, 1 << 30);
};
