/**
 * A build's COPY (and ADD of a local tar): files from the build context, a tar in the object
 * store, written into the building VM through its guest agent. The context is untrusted: its
 * bytes must hash to the digest the control plane recorded before anything parses them, every
 * name must stay inside the context, and only files and directories are copied.
 */
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { open, rm } from "node:fs/promises";
import { posix } from "node:path";
import { pipeline } from "node:stream/promises";
import { Transform, type Readable } from "node:stream";
import { createGunzip } from "node:zlib";
import { extract, type Headers } from "tar-stream";
import { DenError, type host } from "@den/protocol";
import type { ObjectStore } from "@den/store";

type CopyStep = Extract<host.BuildStep, { type: "COPY" }>;

/** What a COPY writes with: the building VM's files (the runtime's and the host's guest files share this shape). */
export interface GuestFilesLike {
  write(path: string, data: AsyncIterable<Uint8Array> | Buffer, opts?: { mode?: number; parents?: boolean; user?: string }): Promise<number>;
  mkdir(path: string, opts?: { parents?: boolean; mode?: number; user?: string }): Promise<void>;
}

export const DEFAULT_MAX_CONTEXT_BYTES = 1024 ** 3;
const MAX_ENTRIES = 200_000;

/** A context-relative name, normalized; undefined for one that climbs out (or is the root itself). */
function contextName(name: string): string | undefined {
  const n = posix.normalize(`/${name}`).slice(1).replace(/\/+$/, "");
  return n === "" || n.startsWith("..") ? undefined : n;
}

/** A glob of docker's COPY (`*`, `?`, `[...]` within one path segment) as a regex. */
function globRegex(pattern: string): RegExp {
  let re = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === "*") re += "[^/]*";
    else if (c === "?") re += "[^/]";
    else if (c === "[") {
      const end = pattern.indexOf("]", i + 1);
      if (end < 0) re += "\\[";
      else {
        re += `[${pattern.slice(i + 1, end).replace(/^!/, "^").replace(/\\/g, "\\\\")}]`;
        i = end;
      }
    } else re += c.replace(/[.+^${}()|\\]/g, "\\$&");
  }
  return new RegExp(`^${re}$`);
}

interface Source {
  /** The normalized src ("" for the whole context). */
  name: string;
  glob?: RegExp;
}

/**
 * Where a context entry lands, or undefined if no src selects it (docker's rules: a
 * directory's contents go into dest; a file goes to dest, or into dest when dest ends in "/",
 * when there are several sources, or when the source is a glob).
 */
function target(entry: string, sources: Source[], dest: string, intoDir: boolean): string | undefined {
  for (const s of sources) {
    if (s.glob) {
      const parts = entry.split("/");
      const depth = s.name.split("/").length;
      if (parts.length < depth || !s.glob.test(parts.slice(0, depth).join("/"))) continue;
      // A glob that matched a directory copies the directory's contents into dest, as docker does.
      return posix.join(dest, parts.slice(depth - 1).join("/"));
    }
    if (s.name === "") return posix.join(dest, entry);
    if (entry === s.name) return intoDir ? posix.join(dest, posix.basename(entry)) : dest;
    if (entry.startsWith(`${s.name}/`)) return posix.join(dest, entry.slice(s.name.length + 1));
  }
  return undefined;
}

/** Streams a stored object into a temp file while hashing it; its digest must be `sha256`, its size at most `max`. */
export async function fetchVerified(store: ObjectStore, key: string, sha256: string, to: string, max: number, signal?: AbortSignal): Promise<void> {
  const hash = createHash("sha256");
  let bytes = 0;
  const meter = new Transform({
    transform(chunk: Buffer, _e, cb) {
      bytes += chunk.length;
      if (bytes > max) return cb(new DenError("image_invalid", `the build context is larger than ${Math.round(max / 1024 ** 2)} MiB`));
      hash.update(chunk);
      cb(null, chunk);
    },
  });
  const src = await store.getStream(key).catch((e: unknown) => {
    throw new DenError("not_found", `the build context ${sha256.slice(0, 12)} is not in the store: ${(e as Error).message}`);
  });
  await pipeline(src, meter, createWriteStream(to, { mode: 0o600 }), { signal });
  if (hash.digest("hex") !== sha256) throw new DenError("image_invalid", `the build context does not match its digest sha256:${sha256.slice(0, 12)}`);
}

/** A tar file's stream, gunzipped if it starts with gzip's magic. */
async function tarInput(file: string): Promise<Readable> {
  const fh = await open(file, "r");
  const { buffer } = await fh.read(Buffer.alloc(2), 0, 2, 0).finally(() => fh.close());
  const raw = createReadStream(file);
  if (buffer[0] !== 0x1f || buffer[1] !== 0x8b) return raw;
  const gunzip = createGunzip();
  raw.on("error", (e) => gunzip.destroy(e));
  return raw.pipe(gunzip);
}

/** Each entry of a tar, in order; `onEntry` consumes (or skips) the entry's body. */
async function eachEntry(input: Readable, onEntry: (h: Headers, body: Readable) => Promise<void>): Promise<void> {
  const ex = extract();
  let n = 0;
  const done = new Promise<void>((resolve, reject) => {
    ex.on("entry", (h, body, next) => {
      if (++n > MAX_ENTRIES) return reject(new DenError("image_invalid", `the build context has more than ${MAX_ENTRIES} entries`));
      onEntry(h, body).then(() => {
        body.resume();
        next();
      }, (e: unknown) => {
        ex.destroy();
        reject(e);
      });
    });
    ex.on("finish", resolve);
    ex.on("error", (e: Error) => reject(e instanceof DenError ? e : new DenError("image_invalid", `the build context is not a valid tar: ${e.message}`)));
  });
  input.on("error", (e) => ex.destroy(e));
  input.pipe(ex);
  await done;
}

/** Writes one tar entry at `to` in the guest; what it is not (a link, a device) is reported and skipped. */
async function place(files: GuestFilesLike, h: Headers, body: Readable, to: string, owner: { user?: string }, chmod: number | undefined, log: (l: string) => void): Promise<boolean> {
  if (h.type === "directory") {
    await files.mkdir(to, { parents: true, mode: chmod ?? (h.mode ?? 0o755) & 0o7777, ...owner });
    return true;
  }
  if (h.type === "file" || h.type === "contiguous-file") {
    await files.write(to, body, { parents: true, mode: chmod ?? (h.mode ?? 0o644) & 0o7777, ...owner });
    return true;
  }
  log(`COPY: ${h.name} is a ${h.type}; only files and directories are copied`);
  return false;
}

/**
 * Runs one COPY step into `files`: `workdir` resolves a relative dest. Returns how many
 * files and directories it wrote; a src that selects nothing is an error, as in docker.
 */
export async function copyFromContext(
  store: ObjectStore, step: CopyStep, files: GuestFilesLike, workdir: string, scratch: string,
  log: (l: string) => void, opts: { maxBytes?: number; signal?: AbortSignal } = {},
): Promise<number> {
  const file = `${scratch}/context-${step.context.sha256.slice(0, 16)}.tar`;
  try {
    await fetchVerified(store, step.context.key, step.context.sha256, file, opts.maxBytes ?? DEFAULT_MAX_CONTEXT_BYTES, opts.signal);
    const dest = posix.resolve(workdir || "/", step.dest);
    const sources: Source[] = step.src.map((s) => {
      const name = s === "." || s === "./" ? "" : contextName(s);
      if (name === undefined) throw new DenError("invalid_argument", `COPY ${s}: the source is outside the build context`);
      return /[*?[]/.test(name) ? { name, glob: globRegex(name) } : { name };
    });
    const intoDir = step.dest.endsWith("/") || step.src.length > 1 || sources.some((s) => s.glob);
    const owner = step.chown ? { user: step.chown.split(":")[0]! } : {};
    const chmod = step.chmod ? parseInt(step.chmod, 8) : undefined;
    const matched = new Set<string>();
    let written = 0;
    await eachEntry(await tarInput(file), async (h, body) => {
      const name = contextName(h.name);
      if (name === undefined) {
        if (posix.normalize(`/${h.name}`) === "/") return;
        throw new DenError("image_invalid", `the build context has an entry outside it: ${JSON.stringify(h.name.slice(0, 200))}`);
      }
      const to = target(name, sources, dest, intoDir);
      if (!to) return;
      for (const s of sources) if (name === s.name || name.startsWith(`${s.name}/`) || s.glob || s.name === "") matched.add(s.name);
      if (step.extract && h.type === "file" && /\.(tar|tar\.gz|tgz)$/.test(name)) {
        // ADD of a local archive: its contents go into dest (names checked as the context's are).
        const inner = /\.(gz|tgz)$/.test(name) ? body.pipe(createGunzip()) : body;
        await eachEntry(inner, async (ih, ibody) => {
          const iname = contextName(ih.name);
          if (iname === undefined) {
            if (posix.normalize(`/${ih.name}`) === "/") return;
            throw new DenError("image_invalid", `ADD ${name}: the archive has an entry outside it: ${JSON.stringify(ih.name.slice(0, 200))}`);
          }
          if (await place(files, ih, ibody, posix.join(dest, iname), owner, chmod, log)) written++;
        });
        return;
      }
      if (await place(files, h, body, to, owner, chmod, log)) written++;
    });
    const missing = sources.filter((s) => !matched.has(s.name));
    if (missing.length) throw new DenError("invalid_argument", `COPY: ${missing.map((s) => s.name || ".").join(", ")}: not found in the build context`);
    return written;
  } finally {
    await rm(file, { force: true });
  }
}
