import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { copyFile, link, mkdir, rm, writeFile } from "node:fs/promises";
import { join, posix } from "node:path";
import { pipeline } from "node:stream/promises";
import { Writable } from "node:stream";
import { createGunzip } from "node:zlib";
import { extract } from "tar-stream";
import { DenError } from "@den/protocol";
import type { BlobCache } from "./blob-cache.js";
import type { Descriptor, ResolvedImage } from "./types.js";

export interface UnpackLimits {
  /** All layers' bytes once decompressed (a decompression bomb stops here). */
  maxUnpackedBytes: number;
  /** Entries over all layers. */
  maxEntries: number;
}

export const DEFAULT_UNPACK_LIMITS: UnpackLimits = { maxUnpackedBytes: 16 * 1024 ** 3, maxEntries: 1_000_000 };

export interface UnpackOptions {
  limits?: Partial<UnpackLimits>;
  signal?: AbortSignal;
  log?: (line: string) => void;
  /** umoci's deadline (default 30 min). */
  timeoutMs?: number;
}

const OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json";
const OCI_CONFIG = "application/vnd.oci.image.config.v1+json";
const OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar";
const OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip";

/** A layer's compression, from its media type (docker's and OCI's). */
function compressionOf(d: Descriptor): "gzip" | "none" {
  const t = d.mediaType;
  if (t.endsWith("+gzip") || t.endsWith(".tar.gzip")) return "gzip";
  if (t.endsWith("+zstd")) throw new DenError("image_invalid", `layer ${d.digest} is zstd-compressed, which this Den cannot unpack yet; push the image with gzip layers`);
  if (t.endsWith(".tar") || t === "application/vnd.docker.image.rootfs.diff.tar") return "none";
  throw new DenError("image_invalid", `layer ${d.digest} has media type ${JSON.stringify(t)}, not a tar`);
}

/** A name that stays inside the root once normalized ("./a/../b" is fine; "../x", "a/../../x" are not). */
function climbsOut(name: string): boolean {
  const n = posix.normalize(name.replace(/^\/+/, ""));
  return n === ".." || n.startsWith("../");
}

/**
 * Reads each layer once before anything extracts it: its uncompressed bytes must hash to
 * the config's diff id (a manifest and config that disagree are refused), stay under the
 * size limit, and hold only entries that stay inside the root and are not device nodes.
 */
async function verifyLayers(image: ResolvedImage, cache: BlobCache, limits: UnpackLimits, opts: UnpackOptions): Promise<number> {
  let total = 0;
  let entries = 0;
  for (const [i, layer] of image.layers.entries()) {
    const diffId = image.diffIds[i]!;
    const hash = createHash("sha256");
    const tar = extract();
    const done = new Promise<void>((resolve, reject) => {
      tar.on("entry", (h, stream, next) => {
        entries++;
        const fail = (why: string) => reject(new DenError("image_invalid", `layer ${i + 1} (${layer.digest.slice(0, 19)}): ${why}`));
        if (entries > limits.maxEntries) return fail(`more than ${limits.maxEntries} entries in the image`);
        if (climbsOut(h.name)) return fail(`entry ${JSON.stringify(h.name)} climbs out of the root`);
        if (h.type === "link" && h.linkname && climbsOut(h.linkname)) return fail(`hard link ${JSON.stringify(h.name)} points out of the root`);
        if (h.type === "character-device" || h.type === "block-device") return fail(`entry ${JSON.stringify(h.name)} is a device node, which images may not carry`);
        stream.on("end", () => next());
        stream.resume();
      });
      tar.on("finish", resolve);
      tar.on("error", (e: Error) => reject(new DenError("image_invalid", `layer ${i + 1} (${layer.digest.slice(0, 19)}) is not a valid tar: ${e.message}`)));
    });
    const counter = new Writable({
      write(chunk: Buffer, _enc, cb) {
        total += chunk.length;
        if (total > limits.maxUnpackedBytes) return cb(new DenError("image_invalid", `the image is larger than ${Math.round(limits.maxUnpackedBytes / 1024 ** 2)} MiB once decompressed`));
        hash.update(chunk);
        if (!tar.write(chunk)) tar.once("drain", () => cb());
        else cb();
      },
      final(cb) {
        tar.end();
        cb();
      },
    });
    const source = createReadStream(cache.path(layer.digest));
    try {
      const stages = compressionOf(layer) === "gzip" ? [source, createGunzip(), counter] as const : [source, counter] as const;
      await Promise.all([
        (pipeline as (...s: unknown[]) => Promise<void>)(...stages, { signal: opts.signal }).catch((e: unknown) => {
          tar.destroy();
          throw e instanceof DenError ? e : new DenError("image_invalid", `layer ${i + 1} (${layer.digest.slice(0, 19)}) does not decompress: ${(e as Error).message}`);
        }),
        done,
      ]);
    } catch (e) {
      source.destroy();
      if (opts.signal?.aborted) throw new DenError("aborted", "the build was cancelled");
      throw e;
    }
    const got = `sha256:${hash.digest("hex")}`;
    if (got !== diffId) throw new DenError("image_invalid", `layer ${i + 1} (${layer.digest.slice(0, 19)}) unpacks to ${got.slice(0, 19)}, but the image's config says ${diffId.slice(0, 19)}`);
  }
  return total;
}

/** Puts a blob into the build's OCI layout: a hard link to the cache's copy (a copy across filesystems). */
async function linkBlob(cache: BlobCache, layout: string, digest: string): Promise<void> {
  const to = join(layout, "blobs", "sha256", digest.slice("sha256:".length));
  await rm(to, { force: true });
  await link(cache.path(digest), to).catch(() => copyFile(cache.path(digest), to));
}

/**
 * An OCI layout of the image for umoci, in OCI media types (a docker image's blobs are the
 * same bytes; only the manifest, which Den writes itself, names them differently).
 */
async function writeLayout(image: ResolvedImage, cache: BlobCache, layout: string): Promise<void> {
  await mkdir(join(layout, "blobs", "sha256"), { recursive: true });
  await writeFile(join(layout, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  for (const d of [image.config, ...image.layers]) await linkBlob(cache, layout, d.digest);
  const manifest = Buffer.from(JSON.stringify({
    schemaVersion: 2, mediaType: OCI_MANIFEST,
    config: { mediaType: OCI_CONFIG, digest: image.config.digest, size: image.config.size },
    layers: image.layers.map((l) => ({ mediaType: compressionOf(l) === "gzip" ? OCI_LAYER_GZIP : OCI_LAYER_TAR, digest: l.digest, size: l.size })),
  }));
  const digest = `sha256:${createHash("sha256").update(manifest).digest("hex")}`;
  await writeFile(join(layout, "blobs", "sha256", digest.slice(7)), manifest);
  await writeFile(join(layout, "index.json"), JSON.stringify({
    schemaVersion: 2,
    manifests: [{ mediaType: OCI_MANIFEST, digest, size: manifest.length, annotations: { "org.opencontainers.image.ref.name": "den" } }],
  }));
}

function run(cmd: string, args: string[], timeoutMs: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ["ignore", "ignore", "pipe"] });
    let tail = "";
    child.stderr.on("data", (d: Buffer) => (tail = (tail + d.toString()).slice(-2000)));
    const kill = () => child.kill("SIGKILL");
    const timer = setTimeout(kill, timeoutMs);
    signal?.addEventListener("abort", kill, { once: true });
    child.on("error", (e) => reject(new DenError("build_failed", `${cmd}: ${e.message}`)));
    child.on("close", (code) => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", kill);
      if (code === 0) return resolve();
      if (signal?.aborted) return reject(new DenError("aborted", "the build was cancelled"));
      reject(new DenError("image_invalid", `the image's layers did not unpack (${cmd} exit ${code ?? "killed"}): ${tail.trim().split("\n").slice(-3).join(" ")}`));
    });
  });
}

/**
 * Unpacks an image whose blobs are in `cache` into `workDir/rootfs`: layers in order, with
 * whiteouts and opaque directories applied, owners, modes, xattrs and hard links kept.
 * The layers are checked first (verifyLayers); umoci then extracts them, resolving every
 * path inside the new root (a symlink in a layer cannot make a later entry land outside it).
 * Returns the root's path and the image's size once unpacked.
 */
export async function unpackImage(image: ResolvedImage, cache: BlobCache, workDir: string, opts: UnpackOptions = {}): Promise<{ rootfs: string; unpackedBytes: number }> {
  const limits = { ...DEFAULT_UNPACK_LIMITS, ...opts.limits };
  if (image.layers.length !== image.diffIds.length) throw new DenError("image_invalid", `the image has ${image.layers.length} layers but its config lists ${image.diffIds.length}`);
  const release = cache.hold([image.config.digest, ...image.layers.map((l) => l.digest)]);
  try {
    opts.log?.(`checking ${image.layers.length} layer(s)`);
    const unpackedBytes = await verifyLayers(image, cache, limits, opts);
    const layout = join(workDir, "layout");
    const rootfs = join(workDir, "rootfs");
    await rm(rootfs, { recursive: true, force: true });
    await writeLayout(image, cache, layout);
    opts.log?.(`unpacking ${(unpackedBytes / 1024 ** 2).toFixed(1)} MB`);
    await run("umoci", ["raw", "unpack", "--image", `${layout}:den`, rootfs], opts.timeoutMs ?? 30 * 60_000, opts.signal);
    await rm(layout, { recursive: true, force: true });
    return { rootfs, unpackedBytes };
  } finally {
    release();
  }
}
