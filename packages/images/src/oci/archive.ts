/**
 * Imports an uploaded image archive — an OCI image layout as a tar (optionally gzip'd) or a
 * `docker save` tarball — into the BlobCache, and resolves the image it holds.
 *
 * The archive is untrusted. It is read once, as a stream, by a tar parser; nothing is ever
 * extracted by the archive's own paths. Only regular files with names an image archive uses
 * are taken: blobs go into the cache with their digests checked, small JSON files are kept in
 * memory under caps, everything else is read past. Links, devices, names that climb out,
 * duplicate names, too many entries or too many bytes refuse the whole archive.
 */
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdtemp, open, readFile, rm, stat } from "node:fs/promises";
import { dirname, join, posix } from "node:path";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import { extract as tarExtract, type Extract, type Headers } from "tar-stream";
import { z } from "zod";
import { DenError } from "@den/protocol";
import type { BlobCache } from "./blob-cache.js";
import { checkImageManifest, formatPlatform, MEDIA_TYPES, parseImageConfig, parseManifestDocument, pickPlatform, sha256Digest, type ImageConfig, type ImageLimits } from "./image-manifest.js";
import type { Descriptor, ResolvedImage } from "./types.js";

// ---------------------------------------------------------------------------------------------
// Options and limits

export interface ArchiveLimits {
  /** Bytes read from the file, and again bytes once a gzip'd archive is inflated (default 16 GiB). */
  maxArchiveBytes: number;
  /** Tar entries of any kind (default 10000). */
  maxEntries: number;
  /** index.json, manifest.json, and each manifest or index blob (default 4 MiB). */
  maxManifestBytes: number;
  /** An image config (default 8 MiB). */
  maxConfigBytes: number;
  /** Layers of the image (default 128). */
  maxLayers: number;
}

export const DEFAULT_ARCHIVE_LIMITS: ArchiveLimits = {
  maxArchiveBytes: 16 * 1024 ** 3,
  maxEntries: 10_000,
  maxManifestBytes: 4 * 1024 ** 2,
  maxConfigBytes: 8 * 1024 ** 2,
  maxLayers: 128,
};

export interface ImportArchiveOptions {
  /** Which image of the archive: an OCI `org.opencontainers.image.ref.name`, or a docker RepoTag. Optional when it holds one. */
  tag?: string;
  platform: { os: "linux"; architecture: string };
  limits?: Partial<ArchiveLimits>;
  signal?: AbortSignal;
  /**
   * Where a docker-save layer is written while its digest is computed (the cache wants the
   * digest before it stores). Default: next to the archive, which already holds that much.
   */
  scratchDir?: string;
}

/**
 * Bytes the tar parser may take in without handing out an entry or a byte of one: headers
 * (pax and GNU long-name headers, which it buffers whole), padding, the end-of-archive zeros,
 * plus a few chunks in flight. Over this, a header is refused rather than buffered (a pax
 * header can claim gigabytes).
 */
const MAX_HEADER_SLACK = 4 * 1024 ** 2;
const MAX_OCI_LAYOUT_BYTES = 64 * 1024;
const MAX_NAME_LENGTH = 4096;
/** How deep an index may nest (index.json -> index -> manifest is the usual depth). */
const MAX_INDEX_DEPTH = 4;

// ---------------------------------------------------------------------------------------------
// What the archive's own files look like (manifests, indexes and configs: ./image-manifest.ts)

const OCI_MANIFEST = MEDIA_TYPES.ociManifest;
const OCI_CONFIG = MEDIA_TYPES.ociConfig;
const OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar";
const INDEX_TYPES = new Set<string>([MEDIA_TYPES.ociIndex, MEDIA_TYPES.dockerList]);
const MANIFEST_TYPES = new Set<string>([MEDIA_TYPES.ociManifest, MEDIA_TYPES.dockerManifest]);

/** A layout's index.json names its images with this annotation (`umoci`, `skopeo`: the tag). */
const REF_NAME = "org.opencontainers.image.ref.name";
/** What containerd (and `docker save` since 25) puts beside it: the full image name. */
const CONTAINERD_NAME = "io.containerd.image.name";

const SHA256_HEX = /^[0-9a-f]{64}$/;
/** index.json's entries, annotations kept (image-manifest's index reader drops them). */
const layoutIndexSchema = z.object({
  schemaVersion: z.literal(2),
  manifests: z.array(z.object({
    mediaType: z.string().min(1).max(256),
    digest: z.string().regex(/^sha256:[0-9a-f]{64}$/, "must be sha256:<64 lowercase hex>"),
    size: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
    annotations: z.record(z.string(), z.string().max(4096)).optional(),
    platform: z.object({ os: z.string().max(64), architecture: z.string().max(64), variant: z.string().max(64).optional() }).optional(),
  })).max(4096),
});
type LayoutEntry = z.infer<typeof layoutIndexSchema>["manifests"][number];
const ociLayoutSchema = z.object({ imageLayoutVersion: z.string().regex(/^1\.\d+\.\d+$/, "must be 1.x.y") });
const dockerManifestSchema = z.array(z.object({
  Config: z.string().max(MAX_NAME_LENGTH),
  RepoTags: z.array(z.string().max(512)).max(1024).nullish(),
  Layers: z.array(z.string().max(MAX_NAME_LENGTH)).max(100_000),
})).max(1024);
type DockerEntry = z.infer<typeof dockerManifestSchema>[number];

function invalid(message: string): DenError {
  return new DenError("image_invalid", message);
}

function parseJson<T>(bytes: Buffer, schema: z.ZodType<T>, what: string): T {
  let raw: unknown;
  try {
    raw = JSON.parse(bytes.toString("utf8"));
  } catch {
    throw invalid(`${what} is not valid JSON`);
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw invalid(`${what} is malformed: ${issue.path.length ? `${issue.path.join(".")}: ` : ""}${issue.message}`);
  }
  return parsed.data;
}

// ---------------------------------------------------------------------------------------------
// Reading the archive: every entry once, in order

/** A file of the archive that is now a blob in the cache. */
interface StoredFile { digest: string; size: number }

/** What one pass over the archive keeps. */
interface ArchiveContents {
  /** Small JSON files by name: `oci-layout`, `index.json`, `manifest.json`. */
  json: Map<string, Buffer>;
  /** Blob-like files by name (`blobs/sha256/<hex>`, `<x>/layer.tar`, `<hex>.tar`, `<hex>.json`), now in the cache. */
  stored: Map<string, StoredFile>;
  /** docker's legacy `<id>/layer.tar` symlinks, as the archive name each points at (never followed on disk). */
  aliases: Map<string, string>;
}

/** How an expected file name is handled. */
type EntryRole =
  | { kind: "json"; max: number }
  /** `blobs/sha256/<hex>`: the name is the digest. */
  | { kind: "blob"; digest: string }
  /** A docker-save layer tar or config: stored under the sha256 of its bytes. */
  | { kind: "hashed"; max: number }
  | { kind: "skip" };

function roleOf(name: string, limits: ArchiveLimits): EntryRole {
  if (name === "oci-layout") return { kind: "json", max: MAX_OCI_LAYOUT_BYTES };
  if (name === "index.json" || name === "manifest.json") return { kind: "json", max: limits.maxManifestBytes };
  const blob = /^blobs\/sha256\/([^/]+)$/.exec(name);
  if (blob && SHA256_HEX.test(blob[1]!)) return { kind: "blob", digest: `sha256:${blob[1]}` };
  // docker's `<id>/layer.tar`; skopeo's and podman's `<hex>.tar`.
  if (name.endsWith("/layer.tar") || /^[0-9a-f]{64}\.tar$/.test(name)) return { kind: "hashed", max: limits.maxArchiveBytes };
  if (/^[0-9a-f]{64}\.json$/.test(name)) return { kind: "hashed", max: limits.maxConfigBytes };
  // `repositories`, docker's `<id>/json` and `<id>/VERSION`, README files...: not needed.
  return { kind: "skip" };
}

/**
 * A tar entry's name made canonical ("./a//b/" -> "a/b"), or a refusal: absolute names,
 * `..` anywhere, NULs. Names are never used as paths; this is so that one file has one name.
 */
function canonicalName(raw: string): string {
  const shown = JSON.stringify(raw.slice(0, 200));
  if (raw.length > MAX_NAME_LENGTH) throw invalid(`the archive has an entry name over ${MAX_NAME_LENGTH} characters`);
  if (raw.includes("\0")) throw invalid(`the archive's entry ${shown} has a NUL in its name`);
  if (raw.startsWith("/")) throw invalid(`the archive's entry ${shown} has an absolute name`);
  const parts = raw.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.includes("..")) throw invalid(`the archive's entry ${shown} has a ".." in its name`);
  return parts.join("/");
}

/**
 * Where a docker legacy symlink `<id>/layer.tar` points, as an archive name, if it is one:
 * skopeo and podman (and docker, for a layer listed twice) write these beside the real tar.
 * Only `../<hex>.tar` or `../<id>/layer.tar` qualify.
 */
function layerAliasTarget(name: string, linkname: string | null | undefined): string | undefined {
  if (!/^[0-9a-f]{64}\/layer\.tar$/.test(name) || !linkname || linkname.startsWith("/") || linkname.includes("\0")) return undefined;
  const target = posix.normalize(posix.join(posix.dirname(name), linkname));
  return /^[0-9a-f]{64}(\.tar|\/layer\.tar)$/.test(target) ? target : undefined;
}

/** Refuses every entry that is not a regular file, a directory, or a docker layer alias. */
function checkEntryType(h: Headers, name: string): "file" | "directory" | "alias" {
  const shown = JSON.stringify(name.slice(0, 200));
  switch (h.type) {
    case "file":
    case "contiguous-file":
      return "file";
    case "directory":
      return "directory";
    case "symlink":
      if (layerAliasTarget(name, h.linkname)) return "alias";
      throw invalid(`the archive's entry ${shown} is a symbolic link; image archives hold regular files only`);
    case "link":
      throw invalid(`the archive's entry ${shown} is a hard link; image archives hold regular files only`);
    case "character-device":
    case "block-device":
      throw invalid(`the archive's entry ${shown} is a device node; image archives hold regular files only`);
    case "fifo":
      throw invalid(`the archive's entry ${shown} is a FIFO; image archives hold regular files only`);
    default:
      throw invalid(`the archive's entry ${shown} has an unsupported tar type (${String(h.type)})`);
  }
}

/**
 * What the feeder and the entry reader share: bytes fed to the parser, and how many had been
 * fed when the parser last handed out an entry or a piece of one (the reader marks it).
 */
interface Progress { fed: number; fedAtLastOutput: number; entries: number }

/** Yields an entry's body, marking progress. */
async function* counted(body: AsyncIterable<Buffer>, progress: Progress): AsyncGenerator<Buffer> {
  for await (const chunk of body) {
    progress.fedAtLastOutput = progress.fed;
    yield chunk;
  }
}

async function drain(body: AsyncIterable<Buffer>, progress: Progress): Promise<void> {
  for await (const _ of counted(body, progress)) { /* read past */ }
}

async function buffer(body: AsyncIterable<Buffer>, progress: Progress, max: number, name: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of counted(body, progress)) {
    size += chunk.length;
    if (size > max) throw invalid(`the archive's ${name} is over ${max} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** A stage of the read pipeline that refuses more than `max` bytes. */
function capBytes(max: number, what: string) {
  return async function* (source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    let total = 0;
    for await (const chunk of source) {
      total += chunk.length;
      if (total > max) throw invalid(`the archive is over ${max} bytes${what}`);
      yield chunk;
    }
  };
}

/**
 * The last stage of the read pipeline: writes into the tar parser, waiting while it is busy.
 * The parser buffers pax and long-name headers whole, so bytes it takes without handing any
 * entry body out are watched: over MAX_HEADER_SLACK, the archive is refused.
 */
function feedTo(tar: Extract, progress: Progress) {
  return async function (source: AsyncIterable<Buffer>): Promise<void> {
    for await (const chunk of source) {
      if (tar.destroyed) return;
      progress.fed += chunk.length;
      if (progress.fed - progress.fedAtLastOutput > MAX_HEADER_SLACK) {
        throw invalid(`the archive has a tar header over ${MAX_HEADER_SLACK} bytes`);
      }
      if (!tar.write(chunk)) await writable(tar);
    }
    if (!tar.destroyed) tar.end();
  };
}

/** Resolves once the parser drains (or is gone: the reader gave up). */
function writable(tar: Extract): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      tar.off("drain", done);
      tar.off("close", done);
      resolve();
    };
    tar.on("drain", done);
    tar.on("close", done);
  });
}

/** Other compressions a user may try, by magic bytes, to say so rather than "not a tar". */
const UNSUPPORTED_COMPRESSION: [string, number[]][] = [["zstd", [0x28, 0xb5, 0x2f, 0xfd]], ["xz", [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]], ["bzip2", [0x42, 0x5a, 0x68]]];

/** Whether the file is gzip'd (by its magic bytes); other compressions are refused here. */
async function isGzip(file: string): Promise<boolean> {
  const fd = await open(file, "r");
  const head = Buffer.alloc(6);
  try {
    await fd.read(head, 0, head.length, 0);
  } finally {
    await fd.close();
  }
  for (const [name, magic] of UNSUPPORTED_COMPRESSION) {
    if (magic.every((b, i) => head[i] === b)) throw invalid(`the archive is ${name}-compressed; upload it as a plain or gzip'd tar`);
  }
  return head[0] === 0x1f && head[1] === 0x8b;
}

/** Why a read failed, as the error to report: Den's own errors pass; a parser's or zlib's become image_invalid. */
function readFailure(e: unknown, signal: AbortSignal | undefined): DenError {
  if (signal?.aborted) return new DenError("aborted", "the archive import was cancelled");
  if (e instanceof DenError) return e;
  const err = e as NodeJS.ErrnoException;
  if (typeof err?.code === "string" && err.code.startsWith("Z_")) return invalid(`the archive's gzip stream is corrupt: ${err.message}`);
  if (typeof err?.code === "string" && /^E[A-Z]+$/.test(err.code) && err.syscall) {
    return new DenError("io_error", `reading the archive failed: ${err.message}`);
  }
  return invalid(`the archive is not a valid tar: ${err?.message ?? String(e)}`);
}

/** State of one pass: where hashed entries are written first, and the cache holds taken. */
class Ingest {
  private scratch: string | undefined;
  private tmpCount = 0;
  readonly releases: (() => void)[] = [];

  constructor(
    private readonly cache: BlobCache,
    private readonly scratchParent: string,
    private readonly signal: AbortSignal,
  ) {}

  /** Stores a blob whose digest the archive names; the cache checks the bytes hash to it. */
  async storeNamed(body: AsyncIterable<Buffer>, digest: string, size: number, progress: Progress): Promise<StoredFile> {
    if (this.cache.has(digest)) {
      this.releases.push(this.cache.hold([digest]));
      await drain(body, progress);
    } else {
      try {
        await this.cache.put({ mediaType: "application/octet-stream", digest, size }, counted(body, progress), this.signal);
      } catch (e) {
        if (e instanceof DenError && e.code === "image_invalid") throw invalid(`the archive's file blobs/sha256/${digest.slice(7, 19)}… is not the blob its name says (${e.message})`);
        throw e;
      }
      this.releases.push(this.cache.hold([digest]));
    }
    return { digest, size };
  }

  /** Stores a file under the sha256 of its bytes (computed on a scratch copy first). */
  async storeHashed(body: AsyncIterable<Buffer>, size: number, progress: Progress): Promise<StoredFile> {
    this.scratch ??= await mkdtemp(join(this.scratchParent, ".den-archive-"));
    const tmp = join(this.scratch, `entry-${++this.tmpCount}`);
    const hash = createHash("sha256");
    try {
      await pipeline(counted(body, progress), async function* (source: AsyncIterable<Buffer>) {
        for await (const chunk of source) {
          hash.update(chunk);
          yield chunk;
        }
      }, createWriteStream(tmp, { flags: "wx" }), { signal: this.signal });
      const digest = `sha256:${hash.digest("hex")}`;
      if (!this.cache.has(digest)) await this.cache.put({ mediaType: "application/octet-stream", digest, size }, createReadStream(tmp), this.signal);
      this.releases.push(this.cache.hold([digest]));
      return { digest, size };
    } finally {
      await rm(tmp, { force: true });
    }
  }

  async cleanup(): Promise<void> {
    if (this.scratch) await rm(this.scratch, { recursive: true, force: true });
  }
}

/** Reads the entries the parser hands out, one at a time, into `contents`. */
async function readEntries(tar: Extract, ingest: Ingest, limits: ArchiveLimits, progress: Progress): Promise<ArchiveContents> {
  const contents: ArchiveContents = { json: new Map(), stored: new Map(), aliases: new Map() };
  const seen = new Set<string>();
  for await (const entry of tar) {
    const h = entry.header;
    progress.entries++;
    progress.fedAtLastOutput = progress.fed;
    if (progress.entries > limits.maxEntries) throw invalid(`the archive has more than ${limits.maxEntries} entries`);
    const name = canonicalName(h.name);
    const type = checkEntryType(h, name);
    if (seen.has(name)) throw invalid(`the archive has two entries named ${JSON.stringify(name.slice(0, 200))}`);
    seen.add(name);
    const size = h.size ?? 0;
    if (!Number.isSafeInteger(size) || size < 0) throw invalid(`the archive's entry ${JSON.stringify(name.slice(0, 200))} has an invalid size`);
    // The parser hands a directory's body to no one: one with a size would never end.
    if (type === "directory" && size !== 0) throw invalid(`the archive's directory ${JSON.stringify(name.slice(0, 200))} claims a size`);
    const body = entry as AsyncIterable<Buffer>;
    if (type === "alias") contents.aliases.set(name, layerAliasTarget(name, h.linkname)!);
    const role = type === "file" ? roleOf(name, limits) : { kind: "skip" as const };
    switch (role.kind) {
      case "skip":
        await drain(body, progress);
        break;
      case "json":
        if (size > role.max) throw invalid(`the archive's ${name} is ${size} bytes, over the ${role.max}-byte limit`);
        contents.json.set(name, await buffer(body, progress, role.max, name));
        break;
      case "blob":
        contents.stored.set(name, await ingest.storeNamed(body, role.digest, size, progress));
        break;
      case "hashed":
        if (size > role.max) throw invalid(`the archive's ${name} is ${size} bytes, over the ${role.max}-byte limit`);
        contents.stored.set(name, await ingest.storeHashed(body, size, progress));
        break;
    }
  }
  return contents;
}

/** One pass over the archive (gzip'd or not) with every count and size bounded. */
async function readArchive(file: string, ingest: Ingest, limits: ArchiveLimits, signal: AbortSignal): Promise<ArchiveContents> {
  const size = await stat(file).then((st) => st.size, (e: NodeJS.ErrnoException) => {
    throw e.code === "ENOENT" ? new DenError("invalid_argument", `no archive at ${file}`) : e;
  });
  if (size > limits.maxArchiveBytes) throw invalid(`the archive is ${size} bytes, over the ${limits.maxArchiveBytes}-byte limit`);
  const gzip = await isGzip(file);
  const tar = tarExtract();
  const progress: Progress = { fed: 0, fedAtLastOutput: 0, entries: 0 };
  const stop = new AbortController();
  let feedError: unknown;
  const stages: unknown[] = [
    createReadStream(file, { highWaterMark: 64 * 1024 }),
    capBytes(limits.maxArchiveBytes, ""),
    ...(gzip ? [createGunzip(), capBytes(limits.maxArchiveBytes, " once inflated")] : []),
    feedTo(tar, progress),
  ];
  const feeding = (pipeline as (...args: unknown[]) => Promise<void>)(...stages, { signal: AbortSignal.any([signal, stop.signal]) }).catch((e: unknown) => {
    if (stop.signal.aborted) return; // the entry reader failed first and stopped the feed
    feedError = e;
    tar.destroy(e instanceof Error ? e : new Error(String(e)));
  });
  try {
    const contents = await readEntries(tar, ingest, limits, progress);
    await feeding;
    if (feedError) throw feedError;
    return contents;
  } catch (e) {
    stop.abort();
    await feeding;
    // The feeder's reason (a limit, a corrupt gzip) beats the entry reader's echo of it.
    throw readFailure(feedError ?? e, signal);
  }
}

// ---------------------------------------------------------------------------------------------
// Resolving the image: shared parts

interface ResolveContext { cache: BlobCache; limits: ArchiveLimits; platform: ImportArchiveOptions["platform"]; signal: AbortSignal | undefined }

function short(digest: string): string {
  return `${digest.slice(0, 19)}…`;
}

/** Reads a small blob (manifest, index, config) from the cache, its size checked against what names it. */
async function readBlob(cache: BlobCache, d: Descriptor, max: number, what: string): Promise<Buffer> {
  if (d.size > max) throw invalid(`the image's ${what} is ${d.size} bytes, over the ${max}-byte limit`);
  await checkBlob(cache, d, what);
  const bytes = await readFile(cache.path(d.digest));
  if (bytes.length !== d.size) throw invalid(`the image's ${what} is ${bytes.length} bytes, but it is described as ${d.size}`);
  return bytes;
}

/** A blob the image needs must be in the archive, exactly as long as what names it says. */
async function checkBlob(cache: BlobCache, d: Descriptor, what: string): Promise<void> {
  if (!cache.has(d.digest)) throw invalid(`the archive lacks the image's ${what} (${short(d.digest)})`);
  const size = (await stat(cache.path(d.digest))).size;
  if (size !== d.size) throw invalid(`the image's ${what} (${short(d.digest)}) is ${size} bytes, but it is described as ${d.size}`);
}

/** Reads the config and refuses an image for another platform, naming the one it is for. */
async function readConfig(d: Descriptor, ctx: ResolveContext): Promise<ImageConfig> {
  const config = parseImageConfig(await readBlob(ctx.cache, d, ctx.limits.maxConfigBytes, "config"), `the image's config ${short(d.digest)}`);
  if (config.platform.os !== ctx.platform.os || config.platform.architecture !== ctx.platform.architecture) {
    throw invalid(`the archive's image is for ${formatPlatform(config.platform)}, not ${formatPlatform(ctx.platform)}`);
  }
  return config;
}

/** Limits of image-manifest's checks, from the archive's: no layer can be larger than the archive. */
function imageLimits(limits: ArchiveLimits): ImageLimits {
  return { maxManifestBytes: limits.maxManifestBytes, maxConfigBytes: limits.maxConfigBytes, maxLayers: limits.maxLayers, maxImageBytes: limits.maxArchiveBytes };
}

/** `busybox` -> `busybox:latest`, `docker.io/library/x:1` -> `x:1`: how docker compares image names. */
function normalizedName(name: string): string {
  let n = name.replace(/^(docker\.io|index\.docker\.io)\//, "").replace(/^library\//, "");
  const last = n.slice(n.lastIndexOf("/") + 1);
  if (!last.includes(":") && !last.includes("@")) n += ":latest";
  return n;
}

function listNames(names: string[]): string {
  const shown = [...new Set(names)].slice(0, 20);
  return shown.length ? shown.map((n) => JSON.stringify(n)).join(", ") : "no tags";
}

/**
 * The images among `items` the caller means: those named `tag` (exactly, else as docker
 * compares names), or all of them; the same image listed twice counts once.
 */
function pickByTag<T>(items: T[], namesOf: (item: T) => string[], tag: string | undefined, key: (item: T) => string): T[] {
  if (items.length === 0) throw new DenError("image_not_found", "the archive holds no image");
  let picked = items;
  if (tag !== undefined) {
    const exact = items.filter((i) => namesOf(i).includes(tag));
    picked = exact.length ? exact : items.filter((i) => namesOf(i).some((n) => normalizedName(n) === normalizedName(tag)));
    if (picked.length === 0) throw new DenError("image_not_found", `the archive has no image tagged ${JSON.stringify(tag)} (it has ${listNames(items.flatMap(namesOf))})`);
  }
  return picked.filter((item, i) => picked.findIndex((other) => key(other) === key(item)) === i);
}

function needTag(names: string[], tag: string | undefined): DenError {
  const what = tag === undefined ? "more than one image; say which with a tag" : `more than one image tagged ${JSON.stringify(tag)}`;
  return new DenError("invalid_argument", `the archive holds ${what} (it has ${listNames(names)})`);
}

// ---------------------------------------------------------------------------------------------
// Resolving an OCI image layout

function layoutEntryNames(d: LayoutEntry): string[] {
  return [d.annotations?.[REF_NAME], d.annotations?.[CONTAINERD_NAME]].filter((n): n is string => typeof n === "string" && n !== "");
}

/** Follows `d` down through nested indexes to the platform's image manifest. */
async function resolveManifest(d: Descriptor, ctx: ResolveContext, depth: number): Promise<{ digest: string; config: Descriptor; layers: Descriptor[] }> {
  const isIndex = INDEX_TYPES.has(d.mediaType);
  if (!isIndex && !MANIFEST_TYPES.has(d.mediaType)) throw invalid(`the archive's image ${short(d.digest)} has media type ${JSON.stringify(d.mediaType.slice(0, 120))}, not an image manifest or index`);
  const what = isIndex ? "image index" : "manifest";
  const where = `the archive's ${what} ${short(d.digest)}`;
  const doc = parseManifestDocument(await readBlob(ctx.cache, d, ctx.limits.maxManifestBytes, what), d.mediaType, where);
  if ((doc.kind === "index") !== isIndex) throw invalid(`${where} is referenced as ${d.mediaType} but is ${doc.kind === "index" ? "an index" : "a manifest"}`);
  if (doc.kind === "manifest") return { digest: d.digest, config: doc.config, layers: doc.layers };
  if (depth >= MAX_INDEX_DEPTH) throw invalid(`the archive's indexes nest deeper than ${MAX_INDEX_DEPTH}`);
  return resolveManifest(pickPlatform(doc.manifests, ctx.platform, where), ctx, depth + 1);
}

async function resolveOciLayout(contents: ArchiveContents, tag: string | undefined, ctx: ResolveContext): Promise<ResolvedImage> {
  parseJson(contents.json.get("oci-layout")!, ociLayoutSchema, "the archive's oci-layout");
  const index = parseJson(contents.json.get("index.json")!, layoutIndexSchema, "the archive's index.json");
  const candidates = pickByTag(index.manifests, layoutEntryNames, tag, (d) => d.digest);
  // Several images (no tag, or a tag on several): the platform may still single one out.
  const forUs = candidates.length === 1 ? candidates : candidates.filter((d) => d.platform?.os === ctx.platform.os && d.platform.architecture === ctx.platform.architecture);
  if (forUs.length !== 1) throw needTag(index.manifests.flatMap(layoutEntryNames), tag);
  const chosen = forUs[0]!;
  const { digest, config: configDesc, layers } = await resolveManifest({ mediaType: chosen.mediaType, digest: chosen.digest, size: chosen.size }, ctx, 0);
  checkImageManifest({ config: configDesc, layers }, imageLimits(ctx.limits), `the archive's manifest ${short(digest)}`);
  const config = await readConfig(configDesc, ctx);
  if (config.diffIds.length !== layers.length) throw invalid(`the image's manifest lists ${layers.length} layers but its config lists ${config.diffIds.length}`);
  for (const [i, layer] of layers.entries()) await checkBlob(ctx.cache, layer, `layer ${i + 1}`);
  const strip = (d: Descriptor): Descriptor => ({ mediaType: d.mediaType, digest: d.digest, size: d.size });
  return { source: "archive", manifestDigest: digest, config: strip(configDesc), layers: layers.map(strip), diffIds: config.diffIds, run: config.run, platform: formatPlatform(config.platform) };
}

// ---------------------------------------------------------------------------------------------
// Resolving a `docker save` tarball

async function resolveDockerSave(contents: ArchiveContents, tag: string | undefined, ctx: ResolveContext): Promise<ResolvedImage> {
  const entries = parseJson(contents.json.get("manifest.json")!, dockerManifestSchema, "the archive's manifest.json");
  const namesOf = (e: DockerEntry) => e.RepoTags ?? [];
  const candidates = pickByTag(entries, namesOf, tag, (e) => e.Config);
  if (candidates.length !== 1) throw needTag(entries.flatMap(namesOf), tag);
  const entry = candidates[0]!;
  if (entry.Layers.length > ctx.limits.maxLayers) throw invalid(`the image has ${entry.Layers.length} layers, over the limit of ${ctx.limits.maxLayers}`);

  const storedAt = (path: string, what: string): StoredFile => {
    let name: string | undefined = canonicalName(path);
    for (let hops = 0; name !== undefined && hops <= 8; hops++, name = contents.aliases.get(name)) {
      const found = contents.stored.get(name);
      if (found) return found;
    }
    throw invalid(`the archive's manifest.json names ${what} ${JSON.stringify(path.slice(0, 200))}, which the archive does not hold`);
  };
  const configFile = storedAt(entry.Config, "a config");
  const configDesc: Descriptor = { mediaType: OCI_CONFIG, digest: configFile.digest, size: configFile.size };
  const config = await readConfig(configDesc, ctx);

  // docker-save layers are plain tars: each one's digest is its diff id.
  const layers: Descriptor[] = entry.Layers.map((path, i) => {
    const f = storedAt(path, `layer ${i + 1}`);
    return { mediaType: OCI_LAYER_TAR, digest: f.digest, size: f.size };
  });
  checkImageManifest({ config: configDesc, layers }, imageLimits(ctx.limits), "the archive's manifest.json");
  if (config.diffIds.length !== layers.length) throw invalid(`the archive's manifest.json lists ${layers.length} layers but the image's config lists ${config.diffIds.length}`);
  for (const [i, layer] of layers.entries()) {
    if (layer.digest !== config.diffIds[i]) throw invalid(`the image's layer ${i + 1} hashes to ${short(layer.digest)}, but its config says ${short(config.diffIds[i]!)}`);
  }

  // A docker-save tarball has no manifest blob: Den stores the OCI manifest it stands for.
  const manifest = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: OCI_MANIFEST, config: configDesc, layers }));
  const manifestDigest = sha256Digest(manifest);
  if (!ctx.cache.has(manifestDigest)) {
    await ctx.cache.put({ mediaType: OCI_MANIFEST, digest: manifestDigest, size: manifest.length }, (async function* () { yield manifest; })(), ctx.signal);
  }
  return { source: "archive", manifestDigest, config: configDesc, layers, diffIds: config.diffIds, run: config.run, platform: formatPlatform(config.platform) };
}

// ---------------------------------------------------------------------------------------------

/**
 * Imports the image archive at `file` into `cache` and returns the image it holds (the one
 * tagged `opts.tag`, if given). Every blob-named file is stored, whether or not the image
 * uses it (the index that says which may come last); the unused ones are left to the cache's
 * LRU. When the archive is both an OCI layout and a docker-save tarball (docker 25+), the
 * OCI layout is used. The returned blobs are not held: hold them before storing more.
 *
 * Errors: `image_invalid` (malformed, lying, over a limit, unsafe entries, other platform),
 * `image_not_found` (no image, or none with the tag), `invalid_argument` (several images and
 * no tag to choose), `aborted`.
 */
export async function importArchive(file: string, cache: BlobCache, opts: ImportArchiveOptions): Promise<ResolvedImage> {
  const limits: ArchiveLimits = { ...DEFAULT_ARCHIVE_LIMITS, ...opts.limits };
  if (opts.tag !== undefined && (opts.tag === "" || opts.tag.length > 512)) throw new DenError("invalid_argument", "tag must be 1 to 512 characters");
  const signal = opts.signal ?? new AbortController().signal;
  const ingest = new Ingest(cache, opts.scratchDir ?? dirname(file), signal);
  try {
    const contents = await readArchive(file, ingest, limits, signal);
    const ctx: ResolveContext = { cache, limits, platform: opts.platform, signal: opts.signal };
    if (contents.json.has("index.json") && contents.json.has("oci-layout")) return await resolveOciLayout(contents, opts.tag, ctx);
    if (contents.json.has("manifest.json")) return await resolveDockerSave(contents, opts.tag, ctx);
    throw new DenError("image_not_found", "the archive holds no image: it has neither an OCI layout (oci-layout, index.json) nor a docker-save manifest.json");
  } finally {
    for (const release of ingest.releases) release();
    await ingest.cleanup();
  }
}
