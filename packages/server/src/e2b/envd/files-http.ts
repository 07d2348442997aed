/**
 * `GET /files` (a file's bytes) and `POST /files` (multipart parts or one raw body, each
 * streamed into the guest): envd's plain HTTP half. Nothing is buffered whole; every
 * upload is bounded; `X-Metadata-*` headers become `user.e2b.*` xattrs.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { posix } from "node:path";
import { Readable } from "node:stream";
import { createGunzip } from "node:zlib";
import busboy from "busboy";
import { DenError, type HostGuest, type e2b } from "@den/protocol";
import { withDeadline } from "./deadline.js";
import { unsupported } from "./entry.js";
import { checkUser, resolvePath } from "./request.js";
import type { EnvdSignature } from "./seam.js";

/** Parts in one multipart upload. */
const MAX_PARTS = 64;
const MAX_METADATA = 32;
const MAX_METADATA_VALUE = 1024;
const METADATA_KEY = /^[A-Za-z0-9!#$%&'*+\-.^_`|~]{1,128}$/;
/** A file write that makes no progress for this long is abandoned. */
const WRITE_IDLE_MS = 120_000;
/** The longest one file's upload may take end to end. */
const WRITE_MS = 3600_000;

export class HttpError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

export function sendHttpError(res: ServerResponse, status: number, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify({ code: status, message } satisfies e2b.HttpError);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

/** A guest error as envd's REST status. */
export function httpStatusOf(e: DenError): number {
  if (e.code === "io_error" && /no space/i.test(e.message)) return 507;
  if (e.code === "sandbox_not_running" || e.code === "sandbox_destroyed" || e.code === "agent_unavailable") return 502;
  if (e.code === "timeout") return 504;
  return e.status >= 500 ? 500 : e.status;
}

export interface FilesQuery {
  path: string | undefined;
  username: string | undefined;
  signature: EnvdSignature | undefined;
}

/** The query of a /files request, with the signature parts exactly as the client signed them. */
export function filesQuery(url: string, operation: "read" | "write"): FilesQuery {
  const q = new URL(url, "http://envd").searchParams;
  const path = q.get("path") ?? undefined;
  const username = q.get("username") ?? undefined;
  if (username !== undefined) checkUser(username);
  if (path !== undefined && (path.length > 4096 || path.includes("\0"))) throw new HttpError(400, "invalid path");
  const sig = q.get("signature");
  const exp = q.get("signature_expiration");
  if (exp !== null && !/^\d{1,12}$/.test(exp)) throw new HttpError(400, "invalid signature_expiration");
  const signature = sig ? { value: sig.slice(0, 200), path: path ?? "", operation, user: username ?? "", ...(exp !== null ? { expiration: Number(exp) } : {}) } : undefined;
  return { path, username, signature };
}

/** Streams a file out: the first chunk is pulled before any header, so a missing file is a clean 404. */
export async function download(guest: HostGuest, user: string, q: FilesQuery, res: ServerResponse): Promise<void> {
  if (!q.path) throw new HttpError(400, "path is required");
  const p = resolvePath(user, q.path);
  const it = guest.files.readStream(p);
  const first = await withDeadline(it.next(), `read of ${p}`);
  res.writeHead(200, {
    "content-type": "application/octet-stream",
    // Guest bytes never render on this origin.
    "x-content-type-options": "nosniff",
    "content-disposition": `attachment; filename*=UTF-8''${encodeURIComponent(posix.basename(p))}`,
    "content-security-policy": "sandbox",
    "cache-control": "no-store",
    ...(first.done ? { "content-length": "0" } : {}),
  });
  if (first.done) return void res.end();
  async function* body(): AsyncGenerator<Buffer> {
    yield first.value as Buffer;
    yield* it;
  }
  await new Promise<void>((resolve) => {
    const r = Readable.from(body());
    r.on("error", () => res.destroy());
    res.on("close", () => {
      r.destroy();
      resolve();
    });
    r.pipe(res);
  });
}

/** Counts bytes through and fails past `limit`, or when the client sends nothing for WRITE_IDLE_MS. */
async function* bounded(source: AsyncIterable<Buffer>, limit: number): AsyncGenerator<Buffer> {
  const it = source[Symbol.asyncIterator]();
  let total = 0;
  for (;;) {
    const r = await withDeadline(it.next(), "upload body", WRITE_IDLE_MS);
    if (r.done) return;
    total += r.value.length;
    if (total > limit) throw new DenError("payload_too_large", `upload exceeds ${limit} bytes`);
    yield r.value;
  }
}

function metadataOf(req: IncomingMessage): Record<string, string> | undefined {
  const out: Record<string, string> = {};
  let n = 0;
  for (const [h, v] of Object.entries(req.headers)) {
    if (!h.startsWith("x-metadata-") || v === undefined) continue;
    const k = h.slice("x-metadata-".length);
    const value = Array.isArray(v) ? v.join(", ") : v;
    if (!METADATA_KEY.test(k) || value.length > MAX_METADATA_VALUE || ++n > MAX_METADATA) throw new HttpError(400, `invalid metadata header ${h.slice(0, 140)}`);
    out[`user.e2b.${k}`] = value;
  }
  return n ? out : undefined;
}

async function writeOne(guest: HostGuest, user: string, target: string, data: AsyncIterable<Buffer>, limit: number, metadata: Record<string, string> | undefined): Promise<e2b.WrittenFile> {
  const p = resolvePath(user, target);
  await withDeadline(guest.files.write(p, bounded(data, limit), { parents: true, user }), `write of ${p}`, WRITE_MS);
  if (metadata) {
    await withDeadline(guest.files.setXattrs(p, metadata), `metadata of ${p}`).catch((e: unknown) => {
      // Dropping metadata the caller asked for would be silent data loss: say so instead.
      throw unsupported(e) ? new HttpError(501, "file metadata is not supported by this sandbox's guest") : e;
    });
  }
  const plain = metadata ? Object.fromEntries(Object.entries(metadata).map(([k, v]) => [k.slice("user.e2b.".length), v])) : undefined;
  return { name: posix.basename(p), type: "file", path: p, ...(plain ? { metadata: plain } : {}) };
}

/** The body, decompressed when it says gzip (bounded after decompression: no zip bombs). */
function bodyOf(req: IncomingMessage): Readable {
  const enc = String(req.headers["content-encoding"] ?? "identity").toLowerCase();
  if (enc === "identity") return req;
  if (enc !== "gzip") throw new HttpError(415, `unsupported content-encoding ${enc.slice(0, 40)}`);
  const gunzip = createGunzip();
  req.on("error", (e) => gunzip.destroy(e));
  return req.pipe(gunzip);
}

export async function upload(guest: HostGuest, user: string, q: FilesQuery, req: IncomingMessage, limit: number): Promise<e2b.WrittenFile[]> {
  const metadata = metadataOf(req);
  const type = String(req.headers["content-type"] ?? "");
  if (!type.toLowerCase().startsWith("multipart/form-data")) {
    if (!q.path) throw new HttpError(400, "path is required for a raw upload");
    return [await writeOne(guest, user, q.path, bodyOf(req), limit, metadata)];
  }
  const written: e2b.WrittenFile[] = [];
  await new Promise<void>((resolve, reject) => {
    let bb: busboy.Busboy;
    try {
      bb = busboy({ headers: req.headers, preservePath: true, limits: { files: MAX_PARTS, parts: MAX_PARTS * 2, fields: MAX_PARTS, fieldSize: 64 * 1024, fileSize: limit, headerPairs: 64 } });
    } catch {
      return reject(new HttpError(400, "malformed multipart request"));
    }
    // Parts are written one after another: busboy reads on only as each part is consumed.
    let chain = Promise.resolve();
    let failed = false;
    const fail = (e: unknown) => {
      if (failed) return;
      failed = true;
      req.unpipe(bb);
      req.resume();
      reject(e);
    };
    bb.on("file", (field, stream, info) => {
      const target = info.filename || q.path;
      if (field !== "file" || !target || failed) return void stream.resume();
      chain = chain.then(async () => {
        if (failed) return void stream.resume();
        stream.on("limit", () => stream.destroy(new DenError("payload_too_large", `upload exceeds ${limit} bytes`)));
        written.push(await writeOne(guest, user, target, stream, limit, metadata));
      }).catch(fail);
    });
    bb.on("filesLimit", () => fail(new HttpError(400, `at most ${MAX_PARTS} files per upload`)));
    bb.on("error", () => fail(new HttpError(400, "malformed multipart request")));
    bb.on("close", () => void chain.then(() => (failed ? undefined : resolve())));
    bodyOf(req).on("error", () => fail(new HttpError(400, "the request body could not be read"))).pipe(bb);
  });
  if (!written.length) throw new HttpError(400, "no file part in the upload (field \"file\")");
  return written;
}
