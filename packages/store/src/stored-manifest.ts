/**
 * A stored snapshot's manifest (`store-manifest.json`): its shape, the digests its upload
 * records (host.StoredDigests), and its read back from the store, checked against those
 * digests before it is parsed and field by field before anything uses it.
 */
import { createHash } from "node:crypto";
import { DenError, type StoredDigests } from "@den/protocol";
import { SUFFIX, type Compression } from "./codec.js";
import type { ObjectStore } from "./object-store.js";

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
  /** The runtime's own manifest of the snapshot, carried along verbatim (its reader checks it). */
  snapshot: unknown;
}

/** The largest manifest read back: one lists a few files (a bigger one is not a manifest of Den's). */
export const MAX_MANIFEST_BYTES = 1 << 20;
/** The most files a stored snapshot has (a template's six, a sandbox's two, a volume's one). */
const MAX_FILES = 16;
/** The largest object or file size believed (1 PiB): sizes are bounded non-negative integers. */
const MAX_SIZE = 2 ** 50;
/** A stored file's name: one path component, no leading dot (it names a file in a download's directory). */
const FILE_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;
const SHA256 = /^[0-9a-f]{64}$/;
/** Names a download writes itself: no stored file may take them. */
const RESERVED = new Set(["manifest.json", STORE_MANIFEST]);

export const idOf = (key: string) => key.slice(key.lastIndexOf("/") + 1);

/** A manifest's bytes as uploadSnapshot writes them. */
export function manifestJson(m: StoredSnapshot): Buffer {
  return Buffer.from(JSON.stringify(m, null, 2));
}

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

/**
 * The digests of a stored snapshot as its upload made it (`m`, what uploadSnapshot returned):
 * the manifest's exact bytes and each object's, as they were hashed on their way up. The
 * control plane records these; a download is checked against them (readStoredManifest).
 */
export function storedDigests(m: StoredSnapshot): StoredDigests {
  const bytes = manifestJson(m);
  return {
    manifest: { size: bytes.length, sha256: sha256(bytes) },
    files: Object.fromEntries(Object.entries(m.files).map(([name, o]) => [name, { size: o.size, sha256: o.sha256 }])),
  };
}

/** Bytes of a stored snapshot as its manifest counts them (objects plus the manifest), without listing the store. */
export function manifestBytes(m: StoredSnapshot): number {
  return Object.values(m.files).reduce((n, o) => n + o.size, 0) + manifestJson(m).length;
}

/**
 * Reads the stored snapshot at `key`'s manifest. With `expected` (the control plane's record
 * of its upload), its bytes must be those recorded before they are parsed, and its files
 * those recorded; without (a copy recorded before digests were: the only case where the
 * store's word is taken), only its fields are checked. Either way every field is checked
 * before it is returned (checkStoredManifest). A manifest that fails is `snapshot_corrupt`.
 */
export async function readStoredManifest(store: ObjectStore, key: string, expected?: StoredDigests): Promise<StoredSnapshot> {
  return (await readChecked(store, key, expected)).m;
}

/**
 * The digests of the stored snapshot at `key` as the store holds it now (its fields checked):
 * for a record whose upload's answer was lost (a control plane that died before it committed),
 * the one time a record is made from the store's word rather than the uploading host's.
 */
export async function readStoredDigests(store: ObjectStore, key: string): Promise<StoredDigests> {
  const { m, raw } = await readChecked(store, key);
  return { ...storedDigests(m), manifest: { size: raw.length, sha256: sha256(raw) } };
}

async function readChecked(store: ObjectStore, key: string, expected?: StoredDigests): Promise<{ m: StoredSnapshot; raw: Buffer }> {
  const id = idOf(key);
  const notRecorded = () => new DenError("snapshot_corrupt", `stored snapshot ${id}: its manifest is not the one its upload recorded (sha256 or size differs); refused before it was read`);
  const raw = await readBounded(store, `${key}/${STORE_MANIFEST}`, expected ? expected.manifest.size : MAX_MANIFEST_BYTES, () => (expected ? notRecorded() : new DenError("snapshot_corrupt", `stored snapshot ${id}: its manifest is over ${MAX_MANIFEST_BYTES} bytes`)));
  if (expected && (raw.length !== expected.manifest.size || sha256(raw) !== expected.manifest.sha256)) throw notRecorded();
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString("utf8"));
  } catch {
    throw new DenError("snapshot_corrupt", `stored snapshot ${id} has an unreadable manifest`);
  }
  const m = checkStoredManifest(parsed, key);
  if (expected) {
    const names = Object.keys(m.files).sort();
    const want = Object.keys(expected.files).sort();
    if (names.join("/") !== want.join("/")) throw new DenError("snapshot_corrupt", `stored snapshot ${id}: its manifest lists other files than its upload recorded`);
    for (const n of names) {
      const o = m.files[n]!;
      const w = expected.files[n]!;
      if (o.size !== w.size || o.sha256 !== w.sha256) throw new DenError("snapshot_corrupt", `stored snapshot ${id}: its file ${n} is not the one its upload recorded`);
    }
  }
  return { m, raw };
}

/** An object's bytes, refused (`tooBig`) past `max`: never buffered whole, the read stops there. */
async function readBounded(store: ObjectStore, key: string, max: number, tooBig: () => Error): Promise<Buffer> {
  const body = await store.getStream(key);
  const parts: Buffer[] = [];
  let n = 0;
  try {
    for await (const chunk of body) {
      n += (chunk as Buffer).length;
      if (n > max) throw tooBig();
      parts.push(chunk as Buffer);
    }
  } finally {
    body.destroy();
  }
  return Buffer.concat(parts);
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isSize = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0 && v <= MAX_SIZE;

/**
 * A stored manifest's every field checked, and a copy of it with those fields only: format
 * 1; its id the key's last part (a manifest copied from another snapshot is not this one);
 * each file's name one plain path component; each object's key the one its name and
 * compression make under `key` (so no object of another snapshot is read in its stead); sizes
 * bounded non-negative integers; digests hex; `snapshot` an object (the runtime's manifest,
 * which its reader checks in turn).
 */
export function checkStoredManifest(v: unknown, key: string): StoredSnapshot {
  const id = idOf(key);
  const bad = (what: string) => new DenError("snapshot_corrupt", `stored snapshot ${id}'s manifest ${what}`);
  if (!isRecord(v) || v.format !== 1) throw bad("is not of format 1");
  if (v.id !== id) throw bad(`names another snapshot (${JSON.stringify(String(v.id).slice(0, 100))})`);
  if (typeof v.storedAt !== "string" || v.storedAt.length > 64) throw bad("has no time it was stored");
  if (!isRecord(v.snapshot)) throw bad("has no snapshot manifest");
  if (!isRecord(v.files)) throw bad("lists no files");
  const names = Object.keys(v.files);
  if (names.length === 0 || names.length > MAX_FILES) throw bad(`lists ${names.length} files`);
  const files: Record<string, StoredObject> = {};
  for (const name of names) {
    if (!FILE_NAME.test(name) || RESERVED.has(name)) throw bad(`names an invalid file ${JSON.stringify(name.slice(0, 100))}`);
    const o = v.files[name];
    if (!isRecord(o)) throw bad(`has no object for ${name}`);
    if (o.compression !== "gzip" && o.compression !== "zstd") throw bad(`names an unknown compression ${JSON.stringify(String(o.compression).slice(0, 20))} for ${name}`);
    if (o.key !== `${key}/${name}${SUFFIX[o.compression]}`) throw bad(`puts ${name} at another key (${JSON.stringify(String(o.key).slice(0, 200))})`);
    if (!isSize(o.size) || !isSize(o.rawSize)) throw bad(`gives ${name} an invalid size`);
    if (typeof o.sha256 !== "string" || !SHA256.test(o.sha256)) throw bad(`gives ${name} an invalid sha256`);
    if (typeof o.rawSha256 !== "string" || (o.rawSha256 !== "" && !SHA256.test(o.rawSha256))) throw bad(`gives ${name} an invalid raw sha256`);
    // (In uploadSnapshot's order: a copy serializes to the same bytes.)
    files[name] = { key: o.key, size: o.size, sha256: o.sha256, compression: o.compression, rawSize: o.rawSize, rawSha256: o.rawSha256 };
  }
  return { format: 1, id, storedAt: v.storedAt, files, snapshot: v.snapshot };
}
