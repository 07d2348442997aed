/**
 * A digest-addressed store of image blobs (layers, configs) on local disk, shared by every pull:
 * `dir/sha256/<hex>`. A blob gets in only through `put`, which checks its size and digest, so
 * whatever is at `path(digest)` is that digest's content. Eviction is least recently used,
 * never of blobs some caller holds.
 */
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, open, readdir, rename, rm, stat, utimes } from "node:fs/promises";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { isDigest } from "./reference.js";
import type { Descriptor } from "./types.js";

/** Default for `DEN_IMAGE_CACHE_MB`. */
export const DEFAULT_IMAGE_CACHE_MB = 10240;

/** The cache's size bound in bytes from `DEN_IMAGE_CACHE_MB` (MiB, default 10240). */
export function imageCacheBytes(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.DEN_IMAGE_CACHE_MB?.trim();
  if (!raw) return DEFAULT_IMAGE_CACHE_MB * 1024 * 1024;
  const mb = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(mb) || mb < 1) {
    throw new DenError("invalid_argument", `DEN_IMAGE_CACHE_MB=${JSON.stringify(raw.slice(0, 40))} is not a positive whole number of MiB`);
  }
  return mb * 1024 * 1024;
}

const TEMP_PREFIX = ".tmp-";
const TEMP_NAME = /^\.tmp-(\d+)-[0-9a-f]+$/;
const BLOB_NAME = /^[a-f0-9]{64}$/;

export interface CollectResult {
  /** Digests removed, oldest first. */
  evicted: string[];
  /** What the cache holds afterwards (may stay above maxBytes if held blobs alone exceed it). */
  bytes: number;
}

export class BlobCache {
  readonly maxBytes: number;
  /** digest -> how many holds are open on it. */
  private readonly holds = new Map<string, number>();

  constructor(
    readonly dir: string,
    opts: { maxBytes: number },
  ) {
    if (!Number.isSafeInteger(opts.maxBytes) || opts.maxBytes < 0) throw new DenError("invalid_argument", "BlobCache maxBytes must be a non-negative integer");
    this.maxBytes = opts.maxBytes;
  }

  private get blobDir(): string {
    return join(this.dir, "sha256");
  }

  /** Where a digest's blob is (or would be). Throws `invalid_argument` for anything but `sha256:<64 hex>`. */
  path(digest: string): string {
    if (!isDigest(digest)) throw new DenError("invalid_argument", `not a sha256 digest: ${JSON.stringify(String(digest).slice(0, 80))}`);
    return join(this.blobDir, digest.slice("sha256:".length));
  }

  has(digest: string): boolean {
    return existsSync(this.path(digest));
  }

  /** Marks a blob as just used (its mtime is the LRU clock). */
  async touch(digest: string): Promise<void> {
    const now = new Date();
    await utimes(this.path(digest), now, now).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== "ENOENT") throw e;
    });
  }

  /** Protects blobs from `collect` until the returned function is called (once is enough; more is harmless). */
  hold(digests: string[]): () => void {
    const held = [...new Set(digests)];
    for (const d of held) this.holds.set(d, (this.holds.get(d) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      for (const d of held) {
        const n = (this.holds.get(d) ?? 1) - 1;
        if (n > 0) this.holds.set(d, n);
        else this.holds.delete(d);
      }
    };
  }

  /**
   * Stores a blob: streams `body` into a temp file beside its final place, hashing as it goes;
   * stops as soon as it runs past `desc.size` (the manifest lied); checks size and sha256, fsyncs,
   * renames into place (two puts of one digest race harmlessly: same content). Returns the path.
   * Any failure removes the temp file; a mismatch is `image_invalid` naming the digest.
   */
  async put(desc: Descriptor, body: AsyncIterable<Uint8Array | string> | NodeJS.ReadableStream, signal?: AbortSignal): Promise<string> {
    const final = this.path(desc.digest);
    if (!Number.isSafeInteger(desc.size) || desc.size < 0) throw new DenError("image_invalid", `blob ${desc.digest} has an invalid size ${String(desc.size)}`);
    if (signal?.aborted) throw abortedError();
    await mkdir(this.blobDir, { recursive: true });
    const temp = join(this.blobDir, `${TEMP_PREFIX}${process.pid}-${randomBytes(8).toString("hex")}`);
    const file = await open(temp, "wx", 0o644);
    // A stalled body yields nothing to check the signal with: ending the stream ends the loop.
    const onAbort = () => {
      const destroy = (body as { destroy?: (e: Error) => void }).destroy;
      if (typeof destroy === "function") destroy.call(body, abortedError());
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    let closed = false;
    try {
      const hash = createHash("sha256");
      let bytes = 0;
      for await (const piece of body as AsyncIterable<Uint8Array | string>) {
        if (signal?.aborted) throw abortedError();
        const chunk = typeof piece === "string" ? Buffer.from(piece) : piece;
        bytes += chunk.length;
        if (bytes > desc.size) throw new DenError("image_invalid", `blob ${desc.digest} is longer than the ${desc.size} bytes its manifest states`);
        hash.update(chunk);
        await file.write(chunk);
      }
      if (signal?.aborted) throw abortedError();
      if (bytes !== desc.size) throw new DenError("image_invalid", `blob ${desc.digest} is ${bytes} bytes, its manifest states ${desc.size}`);
      const actual = `sha256:${hash.digest("hex")}`;
      if (actual !== desc.digest) throw new DenError("image_invalid", `blob ${desc.digest} does not match its digest (its content hashes to ${actual})`);
      await file.sync();
      await file.close();
      closed = true;
      await rename(temp, final);
      return final;
    } catch (e) {
      if (!closed) await file.close().catch(() => {});
      await rm(temp, { force: true });
      throw e;
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /**
   * Evicts least-recently-used blobs that no one holds until the cache is within maxBytes, and
   * removes temp files left by processes that are gone (a crash mid-put).
   */
  async collect(): Promise<CollectResult> {
    let names: string[];
    try {
      names = await readdir(this.blobDir);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return { evicted: [], bytes: 0 };
      throw e;
    }
    const blobs: { digest: string; size: number; mtimeMs: number }[] = [];
    for (const name of names) {
      const temp = TEMP_NAME.exec(name);
      if (temp) {
        if (!processAlive(Number(temp[1]))) await rm(join(this.blobDir, name), { force: true });
        continue;
      }
      if (!BLOB_NAME.test(name)) continue;
      const st = await stat(join(this.blobDir, name)).catch(() => undefined);
      if (st?.isFile()) blobs.push({ digest: `sha256:${name}`, size: st.size, mtimeMs: st.mtimeMs });
    }
    let bytes = blobs.reduce((sum, b) => sum + b.size, 0);
    const evicted: string[] = [];
    blobs.sort((a, b) => a.mtimeMs - b.mtimeMs);
    for (const blob of blobs) {
      if (bytes <= this.maxBytes) break;
      if (this.holds.has(blob.digest)) continue;
      await rm(this.path(blob.digest), { force: true });
      bytes -= blob.size;
      evicted.push(blob.digest);
    }
    return { evicted, bytes };
  }
}

function abortedError(): DenError {
  return new DenError("aborted", "image pull aborted");
}

/** Whether a pid is a live process (EPERM: alive, someone else's). */
function processAlive(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
