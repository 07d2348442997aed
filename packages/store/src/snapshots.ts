import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip, createGzip } from "node:zlib";
import { DenError } from "@den/protocol";
import { faultPoint } from "./faults.js";
import type { ObjectStore, TransferProgress } from "./object-store.js";

export const STORE_MANIFEST = "store-manifest.json";

export interface StoredObject {
  key: string;
  /** Bytes as stored (compressed) and their sha256. */
  size: number;
  sha256: string;
  /** The file as the runtime uses it. */
  rawSize: number;
  rawSha256: string;
  compression: "gzip";
}

export interface StoredSnapshot {
  format: 1;
  id: string;
  storedAt: string;
  files: Record<string, StoredObject>;
  /** The runtime's own manifest of the snapshot, carried along verbatim. */
  snapshot: unknown;
}

function hashing(h: ReturnType<typeof createHash>, count: { n: number }): Transform {
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      h.update(chunk);
      count.n += chunk.length;
      cb(null, chunk);
    },
  });
}

const base = (id: string) => `snapshots/${id}`;

/**
 * Uploads a snapshot directory: every file compressed and hashed, then the manifest
 * last, so a crash mid-upload never leaves something that looks complete. `digests`:
 * files' sha256 the caller already has (the runtime's manifest), not computed again.
 */
export async function uploadSnapshot(
  store: ObjectStore, id: string, dir: string, files: string[], snapshotManifest: unknown,
  onProgress?: (p: TransferProgress) => void,
  digests: Record<string, { size: number; sha256: string }> = {},
): Promise<StoredSnapshot> {
  const stored: Record<string, StoredObject> = {};
  for (const name of files) {
    const tmp = join(dir, `.${name}.gz.upload`);
    const known = digests[name];
    const raw = createHash("sha256");
    const packed = createHash("sha256");
    const rawN = { n: 0 };
    const packedN = { n: 0 };
    try {
      const read = createReadStream(join(dir, name), { highWaterMark: 1 << 20 });
      const gzip = createGzip({ level: 1 });
      if (known) await pipeline(read, gzip, hashing(packed, packedN), createWriteStream(tmp));
      else await pipeline(read, hashing(raw, rawN), gzip, hashing(packed, packedN), createWriteStream(tmp));
      const key = `${base(id)}/${name}.gz`;
      await store.putFile(key, tmp, onProgress);
      stored[name] = {
        key, size: packedN.n, sha256: packed.digest("hex"), compression: "gzip",
        rawSize: known ? known.size : rawN.n, rawSha256: known ? known.sha256 : raw.digest("hex"),
      };
    } finally {
      await rm(tmp, { force: true });
    }
    faultPoint("snapshot-upload-mid");
  }
  const manifest: StoredSnapshot = { format: 1, id, storedAt: new Date().toISOString(), files: stored, snapshot: snapshotManifest };
  await store.putBytes(`${base(id)}/${STORE_MANIFEST}`, Buffer.from(JSON.stringify(manifest, null, 2)));
  return manifest;
}

export async function readStoredManifest(store: ObjectStore, id: string): Promise<StoredSnapshot> {
  const raw = await store.getBytes(`${base(id)}/${STORE_MANIFEST}`);
  try {
    const m = JSON.parse(raw.toString("utf8")) as StoredSnapshot;
    if (m.format !== 1 || typeof m.files !== "object") throw new Error("bad format");
    return m;
  } catch {
    throw new DenError("snapshot_corrupt", `stored snapshot ${id} has an unreadable manifest`);
  }
}

/**
 * Downloads a stored snapshot into `dir`, checking the stored bytes' and the restored
 * files' sha256: a corrupt object is `snapshot_corrupt`, and nothing in `dir` is kept.
 */
export async function downloadSnapshot(
  store: ObjectStore, id: string, dir: string, onProgress?: (p: TransferProgress) => void,
  /** Its manifest, when the caller has already read it. */
  manifest?: StoredSnapshot,
): Promise<StoredSnapshot> {
  const m = manifest ?? (await readStoredManifest(store, id));
  await mkdir(dir, { recursive: true });
  try {
    for (const [name, obj] of Object.entries(m.files)) {
      if (name.includes("/") || name.startsWith(".")) throw new DenError("snapshot_corrupt", `stored snapshot ${id} names an invalid file ${JSON.stringify(name)}`);
      const tmp = join(dir, `.${name}.gz.download`);
      await store.getFile(obj.key, tmp, onProgress);
      const packed = createHash("sha256");
      const raw = createHash("sha256");
      const packedN = { n: 0 };
      const rawN = { n: 0 };
      try {
        await pipeline(createReadStream(tmp, { highWaterMark: 1 << 20 }), hashing(packed, packedN), createGunzip(), hashing(raw, rawN), createWriteStream(join(dir, name)));
      } catch {
        throw new DenError("snapshot_corrupt", `stored object ${obj.key} does not decompress`);
      } finally {
        await rm(tmp, { force: true });
      }
      if (packed.digest("hex") !== obj.sha256 || packedN.n !== obj.size) throw new DenError("snapshot_corrupt", `stored object ${obj.key} fails its sha256 check`);
      if (raw.digest("hex") !== obj.rawSha256 || rawN.n !== obj.rawSize) throw new DenError("snapshot_corrupt", `restored file ${name} fails its sha256 check`);
    }
    await writeFile(join(dir, "manifest.json"), JSON.stringify(m.snapshot, null, 2) + "\n");
    return m;
  } catch (e) {
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
}

/** Deletes a stored snapshot, manifest first (it stops looking complete at once). */
export async function deleteStoredSnapshot(store: ObjectStore, id: string): Promise<void> {
  await store.delete(`${base(id)}/${STORE_MANIFEST}`);
  for (const o of await store.list(`${base(id)}/`)) await store.delete(o.key);
}

/** Bytes a stored snapshot occupies (all its objects). */
export async function storedBytes(store: ObjectStore, id: string): Promise<number> {
  return (await store.list(`${base(id)}/`)).reduce((n, o) => n + o.size, 0);
}

/** Ids of every snapshot with objects in the store, complete or not. */
export async function listStoredSnapshotIds(store: ObjectStore): Promise<string[]> {
  const ids = new Set<string>();
  for (const o of await store.list("snapshots/")) {
    const id = o.key.split("/")[1];
    if (id) ids.add(id);
  }
  return [...ids];
}
