import { createHash } from "node:crypto";
import { createReadStream, fstat } from "node:fs";
import { promisify } from "node:util";
import { mkdir, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { PassThrough, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DenError, type StoredDigests } from "@den/protocol";
import { compress, compressedFile, decompressFdToFd, decompressToFd, decompressToFile, preferredCompression, SUFFIX, ZSTD_COMMAND, ZSTD_LEVEL, type Compression } from "./codec.js";
import { faultPoint } from "./faults.js";
import { hashOpenFile } from "./file-hash.js";
import type { ObjectStore, TransferProgress } from "./object-store.js";
import { STORE_MANIFEST, idOf, manifestJson, readStoredManifest, type StoredObject, type StoredSnapshot } from "./stored-manifest.js";

const fstatAsync = promisify(fstat);

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
  await store.putBytes(`${key}/${STORE_MANIFEST}`, manifestJson(manifest));
  return manifest;
}

/** Whether a complete stored snapshot (its manifest, written last) is at `key`. */
export async function storedSnapshotComplete(store: ObjectStore, key: string): Promise<boolean> {
  return (await store.head(`${key}/${STORE_MANIFEST}`)) !== undefined;
}

/**
 * Downloads a stored snapshot into `dir`, checking each object's stored bytes against its
 * sha256 in the manifest as they come (zstd checks what it decompresses against the frames'
 * checksums): a corrupt object is `snapshot_corrupt`, and nothing in `dir` is kept.
 * `except`: files left in the store (a cold wake streams its state instead, streamStoredFile).
 * `digests`: the control plane's record of the upload, which the manifest is checked against
 * (readStoredManifest) when the caller has not read it.
 */
export async function downloadSnapshot(
  store: ObjectStore, key: string, dir: string, onProgress?: (p: TransferProgress) => void,
  /** Its manifest, when the caller has already read (and so checked) it. */
  manifest?: StoredSnapshot,
  opts: { except?: string[]; digests?: StoredDigests } = {},
): Promise<StoredSnapshot> {
  const m = manifest ?? (await readStoredManifest(store, key, opts.digests));
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

/** Whether a stored snapshot's file can be streamed into a file (streamStoredFile): zstd, whose frames check their own content. */
export function canStreamStoredFile(m: StoredSnapshot, name: string): boolean {
  return m.files[name]?.compression === "zstd";
}

/**
 * Writes one file of a stored snapshot, decompressed, into descriptor `fd` (an empty file of
 * the caller's: a cold wake's state, in its sandbox's directory) as it downloads, hashing the
 * stored bytes as they come. Resolves only once the stored bytes' sha256 (the manifest's,
 * which the control plane's record vouched for) and zstd's checksum of the frames' content
 * both hold, and the file is the size the manifest says: nothing may read the file before.
 * At most that many bytes are written (zstd runs under that file-size limit: a
 * decompression bomb fails instead of filling the disk).
 */
export async function streamStoredFile(store: ObjectStore, m: StoredSnapshot, name: string, fd: number, onProgress?: (p: TransferProgress) => void): Promise<void> {
  checkEntry(m, name);
  const obj = m.files[name]!;
  if (!canStreamStoredFile(m, name)) throw new DenError("snapshot_corrupt", `stored object ${obj.key} cannot be streamed (${obj.compression})`);
  if (!store.openFile) await fetchChecked(store, obj, decompressToFd(fd, obj.rawSize), onProgress);
  else {
    // A local file: zstd reads it itself while it is hashed here by position (the same open
    // file, so what is hashed is what was decompressed); both must hold.
    const fh = await store.openFile(obj.key);
    try {
      // Both run to their end before the file is closed (a read in flight on a closed descriptor would fail).
      const [hashed, unpacked] = await Promise.allSettled([hashOpenFile(fh, obj.size), decompressFdToFd(fh.fd, fd, obj.rawSize)]);
      if (hashed.status === "rejected") throw hashed.reason;
      const sum = hashed.value;
      if (sum.sha256 !== obj.sha256 || sum.size !== obj.size) throw new DenError("snapshot_corrupt", `stored object ${obj.key} fails its sha256 check`);
      if (unpacked.status === "rejected") {
        // (A host that could not write the file is its own error.)
        if ((unpacked.reason as NodeJS.ErrnoException).code) throw unpacked.reason;
        throw new DenError("snapshot_corrupt", `stored object ${obj.key} does not decompress (${(unpacked.reason as Error).message.slice(0, 200)})`);
      }
      onProgress?.({ key: obj.key, bytes: sum.size, total: obj.size });
    } finally {
      await fh.close();
    }
  }
  const size = (await fstatAsync(fd)).size;
  if (size !== obj.rawSize) throw new DenError("snapshot_corrupt", `stored object ${obj.key} decompresses to ${size} bytes, not the ${obj.rawSize} its manifest says`);
}

/** (Its manifest was checked whole by readStoredManifest; this guards a caller's name.) */
function checkEntry(m: StoredSnapshot, name: string): void {
  if (!Object.hasOwn(m.files, name)) throw new DenError("snapshot_corrupt", `stored snapshot ${m.id} has no file ${JSON.stringify(name.slice(0, 100))}`);
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
