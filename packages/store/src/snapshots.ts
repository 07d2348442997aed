import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { PassThrough, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DenError } from "@den/protocol";
import { compress, compressedFile, decompressFdToFd, decompressToFd, decompressToFile, preferredCompression, SUFFIX, ZSTD_COMMAND, ZSTD_LEVEL, type Compression } from "./codec.js";
import { faultPoint } from "./faults.js";
import { hashOpenFile } from "./file-hash.js";
import type { ObjectStore, TransferProgress } from "./object-store.js";

export const STORE_MANIFEST = "store-manifest.json";

export interface StoredObject {
  key: string;
  /** Bytes as stored (compressed) and their sha256. */
  size: number;
  sha256: string;
  /** The file as the runtime uses it. */
  rawSize: number;
  /** Empty for a file streamed into the store as it was made (its stored sha256 is its checksum). */
  rawSha256: string;
  compression: Compression;
}

export interface StoredSnapshot {
  format: 1;
  id: string;
  storedAt: string;
  files: Record<string, StoredObject>;
  /** The runtime's own manifest of the snapshot, carried along verbatim. */
  snapshot: unknown;
}

/** Hashes and counts what passes; more than `limit` bytes is an error (a decompression bomb). */
function hashing(h: ReturnType<typeof createHash>, count: { n: number }, limit = Infinity): Transform {
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      h.update(chunk);
      count.n += chunk.length;
      if (count.n > limit) cb(new Error(`more than the ${limit} bytes expected`));
      else cb(null, chunk);
    },
  });
}

/**
 * Where a snapshot's objects live: `<deployment>/snapshots/<id>/`, so deployments that
 * share a bucket never see each other's; without a deployment, the layout from before
 * deployments had ids (`snapshots/<id>/`), which stored snapshots of that time keep.
 */
export function snapshotKey(id: string, deployment?: string): string {
  return deployment ? `${deployment}/snapshots/${id}` : `snapshots/${id}`;
}

/** Where a template version is kept for every host of a deployment: `<deployment>/templates/<name>/<version>/`. */
export function templateKey(name: string, version: string, deployment: string): string {
  return `${deployment}/templates/${name}/${version}`;
}

/** Files below this are compressed in process (gzip), whatever the preferred codec. */
const SMALL_OBJECT = 1 << 20;

const idOf = (key: string) => key.slice(key.lastIndexOf("/") + 1);

/** An object as it was put: its stored bytes' sum (its raw sum comes from the caller, who hashed the raw bytes). */
export type PutObject = Pick<StoredObject, "key" | "size" | "sha256" | "compression">;

/**
 * Compresses `source` into the store at `objectKey` (after `raw`, a stage that sees the raw
 * bytes), hashing the compressed bytes on their way: no temp copy of the object. Either side
 * failing fails both. `compressed`: the source is compressed already.
 */
async function putCompressed(store: ObjectStore, objectKey: string, source: AsyncIterable<Buffer>, compression: Compression, onProgress?: (p: TransferProgress) => void, opts: { compressed?: boolean; raw?: Transform } = {}): Promise<PutObject> {
  const packed = createHash("sha256");
  const packedN = { n: 0 };
  const out = new PassThrough({ highWaterMark: 1 << 20 });
  const made = opts.compressed
    ? pipeline(source, hashing(packed, packedN), out)
    : opts.raw
      ? pipeline(source, opts.raw, compress(compression), hashing(packed, packedN), out)
      : pipeline(source, compress(compression), hashing(packed, packedN), out);
  // The store's upload stops reading when the pipeline fails; the pipeline stops writing when it does.
  made.catch((e: unknown) => out.destroy(e as Error));
  const uploaded = store.putStream(objectKey, out, onProgress).catch((e: unknown) => {
    out.destroy(e as Error);
    throw e;
  });
  await Promise.all([made, uploaded]);
  return { key: objectKey, size: packedN.n, sha256: packed.digest("hex"), compression };
}

/**
 * One file of a snapshot whose bytes are not in a file (a saved state streaming out of its
 * VM), put as `name` under the snapshot's `key`: uploadSnapshot takes it in `uploaded`.
 */
export function putSnapshotFile(store: ObjectStore, key: string, name: string, source: AsyncIterable<Buffer>, onProgress?: (p: TransferProgress) => void, opts: { compressed?: Compression } = {}): Promise<PutObject> {
  const compression = opts.compressed ?? preferredCompression();
  return putCompressed(store, `${key}/${name}${SUFFIX[compression]}`, source, compression, onProgress, { compressed: opts.compressed !== undefined });
}

/**
 * Like putSnapshotFile, for a producer that writes the compressed file itself into a
 * descriptor (a native tool): the object's bytes never pass through Den. Undefined where
 * the store cannot take it so (S3: the bytes must be sent through Den anyway).
 */
export function putSnapshotFileFromFd(store: ObjectStore, key: string, name: string, compression: Compression, write: (fd: number) => Promise<void>, onProgress?: (p: TransferProgress) => void): Promise<PutObject> | undefined {
  if (!store.putFromFd) return undefined;
  const objectKey = `${key}/${name}${SUFFIX[compression]}`;
  return store.putFromFd(objectKey, write, onProgress).then((made) => ({ key: objectKey, size: made.size, sha256: made.sha256, compression }));
}

/**
 * How a state streaming into the store may come compressed already (the command its
 * producer runs, as `compress` would), or undefined where the store compresses in process.
 */
export function streamCompression(): { compression: Compression; command: string[]; zstdLevel?: number } | undefined {
  return preferredCompression() === "zstd" ? { compression: "zstd", command: [...ZSTD_COMMAND], zstdLevel: ZSTD_LEVEL } : undefined;
}

/**
 * Uploads a snapshot directory under `key` (see snapshotKey): every file compressed and
 * hashed, then the manifest last, so a crash mid-upload never leaves something that
 * looks complete. `digests`: files' sha256 the caller already has (the runtime's
 * manifest), not computed again. `uploaded`: files already put (putSnapshotFile), whose raw
 * sums are in `digests`.
 */
export async function uploadSnapshot(
  store: ObjectStore, key: string, dir: string, files: string[], snapshotManifest: unknown,
  onProgress?: (p: TransferProgress) => void,
  digests: Record<string, { size: number; sha256: string }> = {},
  uploaded: Record<string, PutObject> = {},
): Promise<StoredSnapshot> {
  const stored: Record<string, StoredObject> = {};
  const preferred = preferredCompression();
  for (const name of files) {
    const known = digests[name];
    const put = uploaded[name];
    if (put) {
      if (!known) throw new Error(`uploadSnapshot: ${name} was put without its raw size`);
      stored[name] = { ...put, rawSize: known.size, rawSha256: known.sha256 };
      continue;
    }
    // A small file (a disk overlay of a few KiB) is gzipped in this process: starting a
    // codec process costs more than it would save.
    const compression = (await stat(join(dir, name))).size < SMALL_OBJECT ? "gzip" : preferred;
    const raw = createHash("sha256");
    const rawN = { n: 0 };
    const objectKey = `${key}/${name}${SUFFIX[compression]}`;
    // With its sum known, the codec reads the file itself: only compressed bytes pass through here.
    const obj = known
      ? await putCompressed(store, objectKey, compressedFile(compression, join(dir, name)), compression, onProgress, { compressed: true })
      : await putCompressed(store, objectKey, createReadStream(join(dir, name), { highWaterMark: 1 << 20 }), compression, onProgress, { raw: hashing(raw, rawN) });
    stored[name] = { ...obj, rawSize: known ? known.size : rawN.n, rawSha256: known ? known.sha256 : raw.digest("hex") };
    faultPoint("snapshot-upload-mid");
  }
  const manifest: StoredSnapshot = { format: 1, id: idOf(key), storedAt: new Date().toISOString(), files: stored, snapshot: snapshotManifest };
  await store.putBytes(`${key}/${STORE_MANIFEST}`, Buffer.from(JSON.stringify(manifest, null, 2)));
  return manifest;
}

/** Whether a complete stored snapshot (its manifest, written last) is at `key`. */
export async function storedSnapshotComplete(store: ObjectStore, key: string): Promise<boolean> {
  return (await store.head(`${key}/${STORE_MANIFEST}`)) !== undefined;
}

export async function readStoredManifest(store: ObjectStore, key: string): Promise<StoredSnapshot> {
  const id = idOf(key);
  const raw = await store.getBytes(`${key}/${STORE_MANIFEST}`);
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
 * `except`: files left in the store (a cold wake streams its state instead, streamStoredFile).
 */
export async function downloadSnapshot(
  store: ObjectStore, key: string, dir: string, onProgress?: (p: TransferProgress) => void,
  /** Its manifest, when the caller has already read it. */
  manifest?: StoredSnapshot,
  opts: { except?: string[] } = {},
): Promise<StoredSnapshot> {
  const m = manifest ?? (await readStoredManifest(store, key));
  await mkdir(dir, { recursive: true });
  try {
    for (const [name, obj] of Object.entries(m.files)) {
      checkEntry(m, name);
      if (opts.except?.includes(name)) continue;
      await fetchChecked(store, obj, decompressToFile(obj.compression, join(dir, name), obj.rawSize), onProgress);
      if ((await stat(join(dir, name))).size !== obj.rawSize) throw new DenError("snapshot_corrupt", `restored file ${name} is not the ${obj.rawSize} bytes its manifest says`);
    }
    await writeFile(join(dir, "manifest.json"), JSON.stringify(m.snapshot, null, 2) + "\n");
    return m;
  } catch (e) {
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
}

/** Whether a stored snapshot's file can be streamed (streamStoredFile): zstd, whose frames check their own content. */
export function canStreamStoredFile(m: StoredSnapshot, name: string): boolean {
  return m.files[name]?.compression === "zstd";
}

/**
 * Writes one file of a stored snapshot, decompressed, into descriptor `fd` (a pipe a VM loads
 * from) as it downloads. Resolves only once the stored bytes' sha256 and zstd's checksum of
 * the frames' content both hold: whoever reads the pipe must not use what it read before.
 */
export async function streamStoredFile(store: ObjectStore, m: StoredSnapshot, name: string, fd: number, onProgress?: (p: TransferProgress) => void): Promise<void> {
  checkEntry(m, name);
  const obj = m.files[name]!;
  if (!canStreamStoredFile(m, name)) throw new DenError("snapshot_corrupt", `stored object ${obj.key} cannot be streamed (${obj.compression})`);
  if (!store.openFile) return fetchChecked(store, obj, decompressToFd(fd), onProgress);
  // A local file: zstd reads it itself while it is hashed here by position (the same open
  // file, so what is hashed is what was decompressed); both must hold.
  const fh = await store.openFile(obj.key);
  try {
    // Both run to their end before the file is closed (a read in flight on a closed descriptor would fail).
    const [hashed, unpacked] = await Promise.allSettled([hashOpenFile(fh, obj.size), decompressFdToFd(fh.fd, fd)]);
    if (hashed.status === "rejected") throw hashed.reason;
    const sum = hashed.value;
    if (sum.sha256 !== obj.sha256 || sum.size !== obj.size) throw new DenError("snapshot_corrupt", `stored object ${obj.key} fails its sha256 check`);
    if (unpacked.status === "rejected") throw new DenError("snapshot_corrupt", `stored object ${obj.key} does not decompress (${(unpacked.reason as Error).message.slice(0, 200)})`);
    onProgress?.({ key: obj.key, bytes: sum.size, total: obj.size });
  } finally {
    await fh.close();
  }
}

function checkEntry(m: StoredSnapshot, name: string): void {
  const obj = m.files[name];
  if (!obj || name.includes("/") || name.startsWith(".")) throw new DenError("snapshot_corrupt", `stored snapshot ${m.id} names an invalid file ${JSON.stringify(name)}`);
  if (obj.compression !== "gzip" && obj.compression !== "zstd") throw new DenError("snapshot_corrupt", `stored snapshot ${m.id} names an unknown compression ${JSON.stringify(obj.compression)}`);
}

/** Pours a stored object through `sink` (a decompressor), hashing the stored bytes as they arrive: no temp copy. */
async function fetchChecked(store: ObjectStore, obj: StoredObject, sink: (source: AsyncIterable<Buffer>) => Promise<void>, onProgress?: (p: TransferProgress) => void): Promise<void> {
  const body = await store.getStream(obj.key, onProgress);
  const packed = createHash("sha256");
  const packedN = { n: 0 };
  // The stored bytes are hashed here; the codec writes the output itself (zstd checks its
  // frames' content checksums as it does), so the restored bytes are not hashed again.
  try {
    await pipeline(body, hashing(packed, packedN, obj.size), sink);
  } catch (e) {
    if (e instanceof DenError) throw e;
    // A store that broke mid-read is its own error; bytes that do not decompress are corrupt.
    if ((e as NodeJS.ErrnoException).code && !/^Z_|ERR_STREAM_PREMATURE_CLOSE/.test((e as NodeJS.ErrnoException).code!)) throw e;
    throw new DenError("snapshot_corrupt", `stored object ${obj.key} does not decompress`);
  }
  if (packed.digest("hex") !== obj.sha256 || packedN.n !== obj.size) throw new DenError("snapshot_corrupt", `stored object ${obj.key} fails its sha256 check`);
}

/** Deletes a stored snapshot, manifest first (it stops looking complete at once). */
export async function deleteStoredSnapshot(store: ObjectStore, key: string): Promise<void> {
  await store.delete(`${key}/${STORE_MANIFEST}`);
  for (const o of await store.list(`${key}/`)) await store.delete(o.key);
}

/** Bytes a stored snapshot occupies (all its objects). */
export async function storedBytes(store: ObjectStore, key: string): Promise<number> {
  return (await store.list(`${key}/`)).reduce((n, o) => n + o.size, 0);
}

/** Bytes of a stored snapshot as its manifest counts them (objects plus the manifest), without listing the store. */
export function manifestBytes(m: StoredSnapshot): number {
  return Object.values(m.files).reduce((n, o) => n + o.size, 0) + Buffer.byteLength(JSON.stringify(m, null, 2));
}

/**
 * Every snapshot with objects under `<deployment>/snapshots/`, complete or not, with its
 * key and its newest object's time (for a grace period).
 */
export async function listStoredSnapshots(store: ObjectStore, deployment: string): Promise<Array<{ id: string; key: string; modifiedAt: number }>> {
  const found = new Map<string, { id: string; key: string; modifiedAt: number }>();
  const root = `${deployment}/snapshots/`;
  for (const o of await store.list(root)) {
    const id = o.key.slice(root.length).split("/")[0];
    if (!id) continue;
    const prev = found.get(id);
    found.set(id, { id, key: root + id, modifiedAt: Math.max(prev?.modifiedAt ?? 0, o.modifiedAt) });
  }
  return [...found.values()];
}
